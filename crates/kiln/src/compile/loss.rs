//! Losses with Keras' names, definitions and reduction (mean over the batch,
//! `keras/src/losses/losses.py`).

use burn::prelude::*;

use super::LabelKind;
use crate::error::{KilnError, Result};

mod table;

pub use table::{Family, LOSSES, LossArgs, LossDef, Reduction};

/// Keras clips probabilities to `[EPSILON, 1 - EPSILON]` before taking logs
/// (`keras.config.epsilon()`).
pub const EPSILON: f64 = 1e-7;

/// Which loss, with its arguments. TOML: `loss = "huber"` or
/// `loss = { type = "huber", delta = 0.5 }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossKind {
    /// A Keras loss of the table [`LOSSES`], with its arguments.
    Builtin(Builtin),
    /// A loss registered with [`super::register_loss`], by its name.
    Custom(super::CustomLoss),
}

/// A built-in loss: its entry of [`LOSSES`] and its arguments.
#[derive(Clone, Copy)]
pub struct Builtin {
    /// The loss.
    pub def: &'static LossDef,
    /// Its arguments (those the loss does not take keep Keras' defaults).
    pub args: LossArgs,
}

impl PartialEq for Builtin {
    fn eq(&self, other: &Self) -> bool {
        self.def.name == other.def.name && self.args == other.args
    }
}
impl Eq for Builtin {}

impl std::fmt::Debug for Builtin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let args: Vec<String> = self
            .def
            .args
            .iter()
            .map(|k| format!("{k} = {}", self.args.get(k)))
            .collect();
        write!(f, "{}({})", self.def.name, args.join(", "))
    }
}

/// Shorthands for the first losses of [`LOSSES`] with Keras' default arguments, for code that
/// builds a [`LossSpec`] by hand.
#[allow(non_upper_case_globals)]
impl LossKind {
    /// `sparse_categorical_crossentropy`: integer class labels `[batch]`.
    pub const SparseCategoricalCrossentropy: LossKind = LossKind::builtin(0);
    /// `categorical_crossentropy`: one-hot (or probability) labels.
    pub const CategoricalCrossentropy: LossKind = LossKind::builtin(1);
    /// `binary_crossentropy`: labels in `[0, 1]`, averaged over units.
    pub const BinaryCrossentropy: LossKind = LossKind::builtin(2);
    /// `mean_squared_error`.
    pub const MeanSquaredError: LossKind = LossKind::builtin(3);

    /// What its outputs are (a registered loss: values).
    pub fn family(&self) -> Family {
        match self {
            LossKind::Builtin(b) => b.def.family,
            LossKind::Custom(_) => Family::Values,
        }
    }

    const fn builtin(index: usize) -> LossKind {
        LossKind::Builtin(Builtin {
            def: &LOSSES[index],
            args: LossArgs::KERAS,
        })
    }
}

/// A loss and its `from_logits` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossSpec {
    /// The loss function.
    pub kind: LossKind,
    /// Outputs are unnormalized logits (Keras' `from_logits=True`).
    pub from_logits: bool,
}

impl LossSpec {
    /// Reads `compile.loss`.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `compile.loss` and the allowed names.
    pub fn from_toml(value: &toml::Value) -> Result<LossSpec> {
        Self::from_toml_at(value, "compile.loss")
    }

    /// [`LossSpec::from_toml`] of the value at `key` (e.g. `compile.loss.value`).
    ///
    /// # Errors
    /// As [`LossSpec::from_toml`], naming `key`: an unknown loss (listing the known ones), an
    /// argument the loss does not take, or one out of its range.
    pub fn from_toml_at(value: &toml::Value, key: &str) -> Result<LossSpec> {
        let (mut table, ty) = super::named_table(value, key, &table::names())?;
        if let Some(custom) = super::custom::loss_spec(&ty, &table, key)? {
            return Ok(custom);
        }
        let Some(def) = table::find(&ty) else {
            return Err(KilnError::config(
                format!("{key}.type"),
                format!(
                    "unknown loss \"{ty}\"; allowed: {}{}",
                    table::names(),
                    super::custom::registered_losses()
                ),
            ));
        };
        table.remove("type");
        let from_logits = match table.remove("from_logits") {
            None => false,
            Some(toml::Value::Boolean(b)) => b,
            Some(other) => {
                return Err(KilnError::config(
                    format!("{key}.from_logits"),
                    format!("expected true or false, got {other}"),
                ));
            }
        };
        if from_logits && def.family == Family::Values {
            return Err(KilnError::config(
                format!("{key}.from_logits"),
                format!(
                    "{} compares values, not probabilities: it takes no from_logits; remove it",
                    def.name
                ),
            ));
        }
        let args = loss_args(def, table, key)?;
        Ok(LossSpec {
            kind: LossKind::Builtin(Builtin { def, args }),
            from_logits,
        })
    }

    /// The Keras name.
    pub fn name(&self) -> &'static str {
        match self.kind {
            LossKind::Builtin(b) => b.def.name,
            LossKind::Custom(c) => c.name(),
        }
    }

    /// What its outputs are: probabilities over classes, independent ones, or values (a
    /// registered loss: values).
    pub fn family(&self) -> Family {
        self.kind.family()
    }

    /// True for the cross-entropies over classes, which need at least 2 output units.
    pub fn needs_classes(&self) -> bool {
        matches!(self.kind, LossKind::Builtin(b) if b.def.classes)
    }

    /// True when the labels are integer class indices `[batch]`.
    pub fn sparse_labels(&self) -> bool {
        let labels = match self.kind {
            LossKind::Builtin(b) => b.def.labels,
            LossKind::Custom(c) => c.labels(),
        };
        labels == LabelKind::Sparse
    }

    /// The built-in loss as the TOML table `compile.loss` that reads it back: `type`,
    /// `from_logits` (false for the losses without it) and its arguments.
    pub(super) fn builtin_toml(b: &Builtin, from_logits: bool) -> toml::Table {
        let mut t = toml::Table::new();
        t.insert("type".into(), b.def.name.into());
        t.insert("from_logits".into(), from_logits.into());
        for k in b.def.args {
            t.insert((*k).into(), b.args.get(k));
        }
        if b.args.reduction != Reduction::default() {
            t.insert("reduction".into(), b.args.reduction.name().into());
        }
        t
    }
    /// The mean loss over the batch, a `[1]` tensor.
    ///
    /// `output` is the model's output `[batch, units]`; `logits` the input of its final softmax
    /// when it has one (then, as Keras' TensorFlow backend does, the cross-entropies use the
    /// logits for stability). `labels` is [`Labels::Sparse`] for the sparse loss and
    /// [`Labels::Dense`] (`[batch, units]`) otherwise.
    pub fn compute(
        &self,
        output: Tensor<2>,
        logits: Option<Tensor<2>>,
        labels: &Labels,
    ) -> Tensor<1> {
        self.compute_weighted(output, logits, labels, None)
    }

    /// The loss of a batch with optional per-example weights `sample_weight` (`[batch]`), a
    /// `[1]` tensor: Keras' default reduction `sum_over_batch_size`,
    /// `Σ_i weight_i * loss_i / batch` (`keras/src/losses/loss.py`, `reduce_weighted_values`):
    /// the sum is divided by the batch size, not by the sum of the weights. Without weights,
    /// the mean of the per-example losses. With `reduction = "sum"`, the sum itself.
    pub fn compute_weighted(
        &self,
        output: Tensor<2>,
        logits: Option<Tensor<2>>,
        labels: &Labels,
        sample_weight: Option<&Tensor<1>>,
    ) -> Tensor<1> {
        let per_example = self.per_example(output, logits, labels);
        let weighted = match sample_weight {
            Some(w) => per_example * w.clone(),
            None => per_example,
        };
        match self.kind {
            LossKind::Builtin(b) if b.args.reduction == Reduction::Sum => weighted.sum(),
            _ => weighted.mean(),
        }
    }

    /// The loss of each example, `[batch]` (Keras' loss functions before reduction: the
    /// cross-entropy of each example; for `binary_crossentropy` and `mean_squared_error` the
    /// mean over the output units). Arguments as [`Self::compute`].
    pub fn per_example(
        &self,
        output: Tensor<2>,
        logits: Option<Tensor<2>>,
        labels: &Labels,
    ) -> Tensor<1> {
        let b = match self.kind {
            LossKind::Custom(c) => return c.per_example(output, logits, labels),
            LossKind::Builtin(b) => b,
        };
        let rows = output.dims()[0];
        let per_row = (b.def.rows)(&table::Rows {
            output,
            logits,
            labels,
            args: b.args,
            family: b.def.family,
            from_logits: self.from_logits,
        });
        per_row.reshape([rows])
    }
}

/// The arguments of `def` from `table` (without `type` and `from_logits`).
fn loss_args(def: &LossDef, mut table: toml::Table, key: &str) -> Result<LossArgs> {
    // Every built-in loss takes `reduction` (Keras' `Loss` base class).
    let reduction = match table.remove("reduction") {
        None => Reduction::default(),
        Some(v) => Reduction::parse(&v).map_err(|m| {
            KilnError::config(format!("{key}.reduction"), format!("{}: {m}", def.name))
        })?,
    };
    if let Some(k) = table.keys().find(|k| !def.args.contains(&k.as_str())) {
        let takes = match def.args {
            [] => "only reduction".to_string(),
            a => format!("{}, reduction", a.join(", ")),
        };
        return Err(KilnError::config(
            format!("{key}.{k}"),
            format!("{} has no argument \"{k}\"; it takes {takes}", def.name),
        ));
    }
    let mut args: LossArgs =
        toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| {
                KilnError::config(key, crate::error::humanize(e.message()))
            })?;
    args.reduction = reduction;
    if let Some((k, v, range)) = args.out_of_range() {
        return Err(KilnError::config(
            format!("{key}.{k}"),
            format!("{} needs {k} {range}, got {v}", def.name),
        ));
    }
    Ok(args)
}

/// Labels on the device, in the form the loss needs.
#[derive(Debug, Clone)]
pub enum Labels {
    /// Class indices, `[batch]`.
    Sparse(Tensor<1, Int>),
    /// Targets, `[batch, units]`.
    Dense(Tensor<2>),
    /// One entry per output of a model with several, in `[model] outputs` order.
    Outputs(Vec<Labels>),
}

impl Labels {
    /// Rows (label rows: examples × output positions) held.
    pub fn rows(&self) -> usize {
        match self {
            Labels::Sparse(t) => t.dims()[0],
            Labels::Dense(t) => t.dims()[0],
            Labels::Outputs(all) => all.first().map_or(0, Labels::rows),
        }
    }

    /// Rows `start..start + rows` (each output's, for [`Labels::Outputs`]).
    pub fn narrow(&self, start: usize, rows: usize) -> Labels {
        match self {
            Labels::Sparse(t) => Labels::Sparse(t.clone().narrow(0, start, rows)),
            Labels::Dense(t) => Labels::Dense(t.clone().narrow(0, start, rows)),
            Labels::Outputs(all) => {
                Labels::Outputs(all.iter().map(|l| l.narrow(start, rows)).collect())
            }
        }
    }

    /// The labels on `device` (themselves when already there).
    pub fn to_device(self, device: &Device) -> Labels {
        match self {
            Labels::Sparse(t) => Labels::Sparse(t.to_device(device)),
            Labels::Dense(t) => Labels::Dense(t.to_device(device)),
            Labels::Outputs(all) => {
                Labels::Outputs(all.into_iter().map(|l| l.to_device(device)).collect())
            }
        }
    }
}

#[cfg(test)]
mod keras_tests;

#[cfg(test)]
mod tests {
    use super::*;

    // Keras 3.15 answers from tests/reference/gradient_reference.py ("losses with
    // sample_weight"): `keras.losses.<Loss>(from_logits=...)(y, logits, sample_weight=sw)`.
    const LOGITS: [f32; 12] = [
        2.0, -1.0, 0.5, 0.1, 0.2, 0.3, -1.5, 3.0, 0.0, 1.0, 1.0, -2.0,
    ];
    const CLASSES: [i64; 4] = [0, 2, 1, 1];
    const SW: [f32; 4] = [1.0, 2.0, 0.5, 0.0];
    const BIN_LOGITS: [f32; 8] = [0.3, -1.2, 2.0, 0.1, -0.4, -0.9, 1.5, -2.5];
    const BIN_Y: [f32; 8] = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0];

    fn t2(v: &[f32], shape: [usize; 2]) -> Tensor<2> {
        Tensor::from_data(TensorData::new(v.to_vec(), shape), &Device::flex())
    }
    fn t1(v: &[f32]) -> Tensor<1> {
        Tensor::from_data(TensorData::new(v.to_vec(), [v.len()]), &Device::flex())
    }
    fn spec(kind: LossKind) -> LossSpec {
        LossSpec {
            kind,
            from_logits: true,
        }
    }
    fn loss(kind: LossKind, out: Tensor<2>, labels: &Labels, w: Option<&[f32]>) -> f64 {
        let w = w.map(t1);
        spec(kind)
            .compute_weighted(out, None, labels, w.as_ref())
            .into_scalar::<f32>() as f64
    }
    fn assert_close(got: f64, want: f64) {
        assert!((got - want).abs() <= 1e-6, "{got} vs Keras {want}");
    }

    #[test]
    #[allow(clippy::excessive_precision)]
    fn sample_weights_reduce_over_the_batch_size_as_keras() {
        let sparse = Labels::Sparse(Tensor::from_data(
            TensorData::new(CLASSES.to_vec(), [4]),
            &Device::flex(),
        ));
        let logits = t2(&LOGITS, [4, 3]);
        let scce = LossKind::SparseCategoricalCrossentropy;
        assert_close(
            loss(scce, logits.clone(), &sparse, None),
            0.5050259828567505,
        );
        assert_close(
            loss(scce, logits.clone(), &sparse, Some(&SW)),
            0.5686885118484497,
        );
        // Not Σ w·l / Σ w (that would be 0.5686885 * 4 / 3.5).
        let mut onehot = [0.0f32; 12];
        for (i, &c) in CLASSES.iter().enumerate() {
            onehot[i * 3 + c as usize] = 1.0;
        }
        let dense = Labels::Dense(t2(&onehot, [4, 3]));
        assert_close(
            loss(
                LossKind::CategoricalCrossentropy,
                logits.clone(),
                &dense,
                Some(&SW),
            ),
            0.5686885118484497,
        );
        let bin = Labels::Dense(t2(&BIN_Y, [4, 2]));
        assert_close(
            loss(
                LossKind::BinaryCrossentropy,
                t2(&BIN_LOGITS, [4, 2]),
                &bin,
                Some(&SW),
            ),
            0.34842145442962646,
        );
        assert_close(
            loss(
                LossKind::MeanSquaredError,
                t2(&BIN_LOGITS, [4, 2]),
                &bin,
                Some(&SW),
            ),
            0.7543750405311584,
        );
        // class_weight {0: 1, 2: 3} as Keras' adapter turns it into sample weights [1, 3, 1, 1].
        assert_close(
            loss(scce, logits, &sparse, Some(&[1.0, 3.0, 1.0, 1.0])),
            1.0059974193572998,
        );
    }

    fn parsed(text: &str) -> Result<LossSpec> {
        let t: toml::Table = toml::from_str(&format!("loss = {text}")).unwrap();
        LossSpec::from_toml(&t["loss"])
    }

    #[test]
    #[allow(clippy::excessive_precision)]
    fn reduction_sum_adds_the_weighted_losses_as_keras() {
        // keras.losses.CategoricalCrossentropy(from_logits=True, reduction="sum")(y, logits,
        // sample_weight) (tests/reference/losses_reference.py).
        let mut onehot = [0.0f32; 12];
        for (i, &c) in CLASSES.iter().enumerate() {
            onehot[i * 3 + c as usize] = 1.0;
        }
        let text =
            "{ type = \"categorical_crossentropy\", from_logits = true, reduction = \"sum\" }";
        let sum = parsed(text).unwrap();
        let got = sum
            .compute_weighted(
                t2(&LOGITS, [4, 3]),
                None,
                &Labels::Dense(t2(&onehot, [4, 3])),
                Some(&t1(&SW)),
            )
            .into_scalar::<f32>() as f64;
        assert!((got - 2.274754047393799).abs() <= 1e-5, "{got}");
        // Written back only when not the default, and read back the same.
        assert_eq!(sum.to_toml()["reduction"].as_str(), Some("sum"));
        assert_eq!(LossSpec::from_toml(&sum.to_toml()).unwrap(), sum);
        let default = parsed("\"categorical_crossentropy\"").unwrap();
        assert!(default.to_toml().get("reduction").is_none());
        let mean = parsed("{ type = \"mae\", reduction = \"sum_over_batch_size\" }").unwrap();
        assert_eq!(mean, parsed("\"mae\"").unwrap());
    }

    #[test]
    fn reduction_none_and_unknown_names_are_refused_naming_the_key() {
        let e = parsed("{ type = \"huber\", reduction = \"none\" }")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("compile.loss.reduction: huber: \"none\" keeps one loss per example"),
            "{e}"
        );
        let e = parsed("{ type = \"mse\", reduction = \"average\" }")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("compile.loss.reduction: mean_squared_error: unknown reduction"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }
}
