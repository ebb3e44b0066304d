//! Keras' `fit(class_weight={class: weight})`: per-class loss weights, turned into a
//! `sample_weight` component of each training batch, as Keras' data adapters do
//! (`keras/src/trainers/data_adapters/tf_dataset_adapter.py`, `make_class_weight_map_fn`).
//!
//! The class of an example is its label when labels are class indices (`[batch]` or
//! `[batch, 1]`, rounded half to even as `tf.round`), the argmax of a one-hot / probability row
//! (`[batch, units]`, `units > 1`). Classes absent from the map weigh 1.0. The loss is then
//! `Σ weight_i * loss_i / batch` (see [`crate::compile::LossSpec::compute_weighted`]); metrics
//! in `compile.metrics` stay unweighted, as Keras 3 weights only `weighted_metrics`
//! (`keras/src/trainers/compile_utils.py`, `CompileMetrics.update_state`). Validation data is not
//! weighted by `class_weight` (Keras applies it to the training data only).

use std::collections::BTreeMap;
use std::sync::Arc;

use kiln_data::{Array, Buffer, DataError, Dataset, Element, Parallelism};

use crate::batch::{LABELS, SAMPLE_WEIGHT};
use crate::error::{KilnError, Result};

/// A weight per class index `0..classes`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassWeight {
    weights: Vec<f32>,
}

impl ClassWeight {
    /// Weights for a model with `units` outputs (`units` classes; 2 for a single sigmoid unit,
    /// whose labels are 0 and 1). Classes not in `weights` weigh 1.0.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `fit.class_weight` for a class index `>= classes` or a
    /// weight that is negative or not finite.
    pub fn new(weights: &BTreeMap<usize, f64>, units: usize) -> Result<ClassWeight> {
        let classes = units.max(2);
        let mut table = vec![1.0f32; classes];
        for (&class, &w) in weights {
            let key = format!("fit.class_weight.\"{class}\"");
            if class >= classes {
                return Err(KilnError::config(
                    key,
                    format!(
                        "class {class} does not exist: the model has {units} output unit{} \
                         (classes 0 to {}); use class indices below {classes}",
                        if units == 1 { "" } else { "s" },
                        classes - 1
                    ),
                ));
            }
            if !(w >= 0.0 && w.is_finite()) {
                return Err(KilnError::config(
                    key,
                    format!("must be a finite number >= 0, got {w}"),
                ));
            }
            table[class] = w as f32;
        }
        Ok(ClassWeight { weights: table })
    }

    /// Reads `[fit] class_weight = { "0" = 1.0, "6" = 2.0 }` (TOML keys are strings) for a
    /// model with `units` outputs; `None` when the table is empty.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `fit.class_weight` for a key that is not a class index, and
    /// as [`ClassWeight::new`].
    pub fn from_config(table: &BTreeMap<String, f64>, units: usize) -> Result<Option<ClassWeight>> {
        if table.is_empty() {
            return Ok(None);
        }
        let mut weights = BTreeMap::new();
        for (key, &w) in table {
            let class = key.trim().parse::<usize>().map_err(|_| {
                KilnError::config(
                    format!("fit.class_weight.\"{key}\""),
                    "keys are class indices (non-negative integers), as \"0\" = 1.0",
                )
            })?;
            weights.insert(class, w);
        }
        ClassWeight::new(&weights, units).map(Some)
    }

    /// The weight of class `class` (1.0 for a class outside the table, as Keras'
    /// `class_weight.get(class, 1.0)`).
    pub fn weight(&self, class: i64) -> f32 {
        usize::try_from(class)
            .ok()
            .and_then(|c| self.weights.get(c).copied())
            .unwrap_or(1.0)
    }

    /// The sample weights `[batch]` of a batch's labels `y`.
    ///
    /// # Errors
    /// [`DataError::Map`] for non-numeric labels.
    pub fn sample_weights(&self, y: &Array) -> std::result::Result<Vec<f32>, DataError> {
        let values = y.data().try_to_f32().map_err(|_| {
            DataError::Map(format!(
                "fit.class_weight: the labels (batch component \"{LABELS}\") are {} values, not \
                 class labels",
                y.dtype()
            ))
        })?;
        let shape = y.shape();
        let per_example = match shape {
            [] | [_] => 1,
            [.., last] => *last,
        };
        let class = |row: &[f32]| -> i64 {
            if per_example > 1 {
                crate::compile::argmax(row) as i64
            } else {
                row[0].round_ties_even() as i64
            }
        };
        Ok(values
            .chunks(per_example.max(1))
            .map(|row| self.weight(class(row)))
            .collect())
    }

    /// Adds a [`SAMPLE_WEIGHT`] component to each batch of `data` (a batched dataset with
    /// labels `y`), as Keras does for `class_weight`. Batches without labels pass unchanged.
    /// Iterating yields [`DataError::Map`] for a batch that already has sample weights (Keras:
    /// "You cannot `class_weight` and `sample_weight` at the same time.").
    pub fn apply(self, data: Dataset) -> Dataset {
        let this = Arc::new(self);
        data.map(
            move |mut el: Element| {
                let Some(y) = el.get(LABELS) else {
                    return Ok(el);
                };
                if el.get(SAMPLE_WEIGHT).is_some() {
                    return Err(DataError::Map(format!(
                        "fit.class_weight: the training data already has a \"{SAMPLE_WEIGHT}\" \
                         component, and class weights would replace it (Keras refuses \
                         class_weight and sample_weight together); remove one of them"
                    )));
                }
                let w = this.sample_weights(y)?;
                let n = w.len();
                el.insert(SAMPLE_WEIGHT, Array::new(vec![n], Buffer::F32(w))?);
                Ok(el)
            },
            Parallelism::Sequential,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cw(pairs: &[(usize, f64)], units: usize) -> ClassWeight {
        ClassWeight::new(&pairs.iter().copied().collect(), units).unwrap()
    }

    /// Keras 3.15 `class_weight_to_sample_weights` (tests/reference/gradient_reference.py):
    /// labels [0, 2, 1, 1] with {0: 1, 2: 3} -> [1, 3, 1, 1], sparse or one-hot; single-unit
    /// binary labels [[0.2], [0.9], [0.6], [0.4]] with {1: 5} -> [1, 5, 5, 1].
    #[test]
    fn classes_resolve_as_keras_adapter() {
        let w = cw(&[(0, 1.0), (2, 3.0)], 3);
        let sparse = Array::new(vec![4], Buffer::I64(vec![0, 2, 1, 1])).unwrap();
        assert_eq!(w.sample_weights(&sparse).unwrap(), vec![1.0, 3.0, 1.0, 1.0]);
        let mut onehot = vec![0.0f32; 12];
        for (i, c) in [0, 2, 1, 1].into_iter().enumerate() {
            onehot[i * 3 + c] = 1.0;
        }
        let onehot = Array::new(vec![4, 3], Buffer::F32(onehot)).unwrap();
        assert_eq!(w.sample_weights(&onehot).unwrap(), vec![1.0, 3.0, 1.0, 1.0]);
        let single = Array::new(vec![4, 1], Buffer::F32(vec![0.2, 0.9, 0.6, 0.4])).unwrap();
        assert_eq!(
            cw(&[(1, 5.0)], 1).sample_weights(&single).unwrap(),
            vec![1.0, 5.0, 5.0, 1.0]
        );
        // tf.round rounds half to even: 0.5 -> class 0, 1.5 -> class 2 (outside: 1.0).
        let halves = Array::new(vec![2], Buffer::F32(vec![0.5, 2.5])).unwrap();
        assert_eq!(
            cw(&[(0, 4.0), (2, 7.0)], 3)
                .sample_weights(&halves)
                .unwrap(),
            vec![4.0, 7.0]
        );
    }

    #[test]
    fn config_errors_name_the_key() {
        let table = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        assert_eq!(ClassWeight::from_config(&table(&[]), 10).unwrap(), None);
        let w = ClassWeight::from_config(&table(&[("0", 1.0), ("6", 2.0)]), 10)
            .unwrap()
            .unwrap();
        assert_eq!((w.weight(6), w.weight(3), w.weight(0)), (2.0, 1.0, 1.0));
        let e = ClassWeight::from_config(&table(&[("10", 2.0)]), 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            "fit.class_weight.\"10\": class 10 does not exist: the model has 10 output units \
             (classes 0 to 9); use class indices below 10"
        );
        // One sigmoid unit: classes 0 and 1.
        assert!(ClassWeight::from_config(&table(&[("1", 2.0)]), 1).is_ok());
        assert!(ClassWeight::from_config(&table(&[("2", 2.0)]), 1).is_err());
        let e = ClassWeight::from_config(&table(&[("cat", 2.0)]), 10).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("fit.class_weight.\"cat\": keys are class indices"),
            "{e}"
        );
        let e = ClassWeight::from_config(&table(&[("1", -0.5)]), 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            "fit.class_weight.\"1\": must be a finite number >= 0, got -0.5"
        );
    }

    #[test]
    fn apply_adds_sample_weights_and_refuses_existing_ones() {
        let x = Array::new(vec![4, 1], Buffer::F32(vec![0.0; 4])).unwrap();
        let y = Array::new(vec![4], Buffer::I64(vec![0, 2, 1, 1])).unwrap();
        let data = Dataset::from_tensor_slices(Element::new().with("x", x).with("y", y))
            .unwrap()
            .batch(3, false);
        let weighted = cw(&[(2, 3.0), (1, 0.5)], 3).apply(data.clone());
        let got: Vec<Vec<f32>> = weighted
            .iter()
            .map(|b| b.unwrap().get(SAMPLE_WEIGHT).unwrap().data().to_f32())
            .collect();
        assert_eq!(got, vec![vec![1.0, 3.0, 0.5], vec![0.5]]);
        let sw = Array::new(vec![3], Buffer::F32(vec![1.0; 3])).unwrap();
        let twice = cw(&[(2, 3.0)], 3).apply(data.map(
            move |el| Ok(el.with(SAMPLE_WEIGHT, sw.clone())),
            Parallelism::Sequential,
        ));
        let e = twice.iter().next().unwrap().unwrap_err().to_string();
        assert!(
            e.contains("Keras refuses class_weight and sample_weight together"),
            "{e}"
        );
    }
}
