//! The names of a batch's components, as a tf.data element's keys: features `x`, labels `y`
//! and Keras' `sample_weight` (an `(x, y, sample_weight)` element). A bottom-layer module:
//! it imports nothing of the crate.

/// Name of the features component of a batch.
pub const FEATURES: &str = "x";
/// Name of the labels component of a batch.
pub const LABELS: &str = "y";
/// Name of the optional per-example loss weights of a batch (`[batch]` or `[batch, 1]`,
/// numeric): Keras' `sample_weight`, the third item of an `(x, y, sample_weight)` element.
pub const SAMPLE_WEIGHT: &str = "sample_weight";
