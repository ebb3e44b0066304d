//! The search space: Keras Tuner's hyperparameter kinds, read from the tune config's
//! `[[hyperparameters]]` tables.
