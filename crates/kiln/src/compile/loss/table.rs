//! The built-in losses as data: one [`LossDef`] per Keras loss (name, aliases, arguments,
//! label form and formula, `keras/src/losses/losses.py`), in [`LOSSES`].
//!
//! Each formula gives the loss of every row `[rows, 1]` (a row is one position of an output of
//! any rank: its last axis); [`super::LossSpec`] reduces the rows by the loss's `reduction`
//! (Keras' default `sum_over_batch_size`).

use burn::prelude::*;
use burn::tensor::activation::{log_sigmoid, log_softmax, sigmoid, softmax, softplus};
use serde::Deserialize;

use super::{EPSILON, LabelKind, Labels};

/// What `from_logits` means for a loss, and how its labels are smoothed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Outputs are values: no `from_logits`, no `label_smoothing`.
    Values,
    /// Class probabilities over the last axis (softmax of logits); smoothing
    /// `y (1 - s) + s / classes`.
    Softmax,
    /// Independent probabilities (sigmoid of logits); smoothing `y (1 - s) + s / 2`.
    Sigmoid,
}

/// One built-in loss.
pub struct LossDef {
    /// The Keras name (`keras.losses.get`), written back to the run directory's config.
    pub name: &'static str,
    /// Other names Keras accepts (`mae`, `kld`).
    pub aliases: &'static [&'static str],
    /// Its probabilities, if any.
    pub family: Family,
    /// The labels it takes.
    pub labels: LabelKind,
    /// Its keyword arguments besides `from_logits` (which a [`Family::Values`] loss lacks).
    pub args: &'static [&'static str],
    /// True when it needs at least 2 units (classes) on the last axis.
    pub classes: bool,
    /// The loss of each row, `[rows, 1]`.
    pub rows: fn(&Rows) -> Tensor<2>,
}

/// Keras' keyword arguments of the built-in losses besides `from_logits` (a field of
/// [`super::LossSpec`]), with Keras' defaults; each loss reads the ones its [`LossDef::args`]
/// lists.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LossArgs {
    /// Keras' `label_smoothing`, in `[0, 1]`.
    pub label_smoothing: f64,
    /// `huber`'s `delta`: where the loss turns from quadratic to linear, `>= 0`.
    pub delta: f64,
    /// The focal losses' `alpha`, in `[0, 1]`.
    pub alpha: f64,
    /// The focal losses' focusing `gamma`, `>= 0`.
    pub gamma: f64,
    /// `binary_focal_crossentropy`'s `apply_class_balancing` (weights by `alpha`).
    pub apply_class_balancing: bool,
    /// Keras' `reduction`, which every built-in loss takes (read apart from the others, see
    /// [`Reduction::parse`]).
    #[serde(skip)]
    pub reduction: Reduction,
}

/// Keras' `reduction` of a loss's per-position values to the batch's loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reduction {
    /// `"sum_over_batch_size"` (Keras' default): the sum divided by the number of values.
    #[default]
    SumOverBatchSize,
    /// `"mean"`: in Keras 3, the same as `sum_over_batch_size`.
    Mean,
    /// `"sum"`: the sum of the (weighted) values.
    Sum,
}

impl Reduction {
    /// Keras' name.
    pub fn name(self) -> &'static str {
        match self {
            Reduction::SumOverBatchSize => "sum_over_batch_size",
            Reduction::Mean => "mean",
            Reduction::Sum => "sum",
        }
    }

    /// The reduction written `value`.
    ///
    /// # Errors
    /// A message for `"none"` (no scalar loss to train on), names kiln does not take, and
    /// values that are not strings.
    pub fn parse(value: &toml::Value) -> std::result::Result<Reduction, String> {
        let allowed = "allowed: \"sum_over_batch_size\" (default), \"sum\", \"mean\"";
        match value.as_str() {
            Some("sum_over_batch_size") => Ok(Reduction::SumOverBatchSize),
            Some("mean") => Ok(Reduction::Mean),
            Some("sum") => Ok(Reduction::Sum),
            Some("none") => Err(format!(
                "\"none\" keeps one loss per example, which fit cannot minimize (Keras uses it \
                 when calling a loss by hand); {allowed}"
            )),
            Some("mean_with_sample_weight") => Err(format!(
                "\"mean_with_sample_weight\" is not supported by kiln; {allowed}"
            )),
            _ => Err(format!("unknown reduction {value}; {allowed}")),
        }
    }
}

impl LossArgs {
    /// Keras' defaults.
    pub const KERAS: LossArgs = LossArgs {
        label_smoothing: 0.0,
        delta: 1.0,
        alpha: 0.25,
        gamma: 2.0,
        apply_class_balancing: false,
        reduction: Reduction::SumOverBatchSize,
    };

    /// The argument out of its range, and the range, if any.
    pub fn out_of_range(&self) -> Option<(&'static str, f64, &'static str)> {
        let checks = [
            ("label_smoothing", self.label_smoothing, (0.0, 1.0)),
            ("delta", self.delta, (0.0, f64::INFINITY)),
            ("alpha", self.alpha, (0.0, 1.0)),
            ("gamma", self.gamma, (0.0, f64::INFINITY)),
        ];
        checks
            .into_iter()
            .find(|(_, v, (lo, hi))| !(v.is_finite() && lo <= v && v <= hi))
            .map(|(key, v, (_, hi))| (key, v, if hi.is_finite() { "in [0, 1]" } else { ">= 0" }))
    }

    /// The value of argument `key` as TOML (for the run directory's config).
    pub fn get(&self, key: &str) -> toml::Value {
        match key {
            "label_smoothing" => self.label_smoothing.into(),
            "delta" => self.delta.into(),
            "alpha" => self.alpha.into(),
            "gamma" => self.gamma.into(),
            "apply_class_balancing" => self.apply_class_balancing.into(),
            other => unreachable!("no loss argument {other}"),
        }
    }
}

impl Default for LossArgs {
    fn default() -> Self {
        Self::KERAS
    }
}

// Validated arguments are finite, so equality is an equivalence.
impl Eq for LossArgs {}

/// What a formula sees: the outputs `[rows, units]`, their softmax input when the model ends
/// with one, the labels and the arguments.
pub struct Rows<'a> {
    pub output: Tensor<2>,
    pub logits: Option<Tensor<2>>,
    pub labels: &'a Labels,
    pub args: LossArgs,
    pub family: Family,
    pub from_logits: bool,
}

impl Rows<'_> {
    /// The dense targets, label-smoothed as the loss's family does (Keras).
    fn y(&self) -> Tensor<2> {
        let Labels::Dense(y) = self.labels else {
            panic!("labels were prepared for another loss (expected dense targets)");
        };
        let s = self.args.label_smoothing;
        if s == 0.0 {
            return y.clone();
        }
        let classes = y.dims()[1] as f64;
        let spread = match self.family {
            Family::Sigmoid => 0.5,
            _ => 1.0 / classes,
        };
        y.clone().mul_scalar(1.0 - s).add_scalar(s * spread)
    }

    /// Log class probabilities over the last axis: from logits, from the softmax input when
    /// the model ends with one (as Keras' TensorFlow backend), else normalized and clipped.
    fn log_probs(&self) -> Tensor<2> {
        if self.from_logits {
            log_softmax(self.output.clone(), 1)
        } else if let Some(l) = self.logits.clone() {
            log_softmax(l, 1)
        } else {
            clipped(normalized(self.output.clone())).log()
        }
    }

    /// `(log p, log (1 - p))` of independent probabilities.
    fn log_sigmoids(&self) -> (Tensor<2>, Tensor<2>) {
        let o = self.output.clone();
        if self.from_logits {
            (log_sigmoid(o.clone()), log_sigmoid(o.neg()))
        } else {
            let p = o.clamp(EPSILON, 1.0 - EPSILON);
            (p.clone().log(), p.neg().add_scalar(1.0).log())
        }
    }

    /// The difference `output - y`.
    fn error(&self) -> Tensor<2> {
        self.output.clone() - self.y()
    }
}

fn normalized(p: Tensor<2>) -> Tensor<2> {
    p.clone() / p.sum_dim(1)
}

fn clipped(p: Tensor<2>) -> Tensor<2> {
    p.clamp(EPSILON, 1.0 - EPSILON)
}

/// `x` over its L2 norm along the last axis (Keras' `normalize`: `x * min(rsqrt(Σx²), 1/ε)`).
fn unit(x: Tensor<2>) -> Tensor<2> {
    let inv = x.clone().square().sum_dim(1).sqrt().recip();
    x * inv.clamp_max(1.0 / EPSILON)
}

/// Binary labels `{0, 1}` as `{-1, 1}` when every label is 0 or 1, else as given (Keras'
/// `convert_binary_labels_to_hinge`), on the device.
fn hinge_labels(y: Tensor<2>) -> Tensor<2> {
    let binary = y
        .clone()
        .equal_elem(0.0)
        .bool_or(y.clone().equal_elem(1.0))
        .all()
        .float()
        .reshape([1, 1]);
    y.clone() + (y.sub_scalar(1.0) * binary)
}

/// `1 - y · p` clamped at 0, the hinge margin.
fn margin(r: &Rows) -> Tensor<2> {
    (hinge_labels(r.y()) * r.output.clone())
        .neg()
        .add_scalar(1.0)
        .clamp_min(0.0)
}

fn sparse_crossentropy(r: &Rows) -> Tensor<2> {
    let Labels::Sparse(y) = r.labels else {
        panic!("labels were prepared for another loss (expected class indices)");
    };
    let rows = y.dims()[0];
    r.log_probs().gather(1, y.clone().reshape([rows, 1])).neg()
}

fn binary_crossentropy(r: &Rows) -> Tensor<2> {
    let y = r.y();
    let (log_p, log_not_p) = r.log_sigmoids();
    (y.clone() * log_p + y.neg().add_scalar(1.0) * log_not_p)
        .mean_dim(1)
        .neg()
}

fn huber(r: &Rows) -> Tensor<2> {
    let delta = r.args.delta;
    let abs = r.error().abs();
    let quadratic = abs.clone().clamp_max(delta);
    (quadratic.clone().square().mul_scalar(0.5) + (abs - quadratic).mul_scalar(delta)).mean_dim(1)
}

fn kl_divergence(r: &Rows) -> Tensor<2> {
    let y = r.y().clamp(EPSILON, 1.0);
    let p = r.output.clone().clamp(EPSILON, 1.0);
    (y.clone() * (y / p).log()).sum_dim(1)
}

fn categorical_hinge(r: &Rows) -> Tensor<2> {
    let (y, p) = (r.y(), r.output.clone());
    let pos = (y.clone() * p.clone()).sum_dim(1);
    let neg = (y.neg().add_scalar(1.0) * p).max_dim(1);
    (neg - pos).add_scalar(1.0).clamp_min(0.0)
}

fn binary_focal(r: &Rows) -> Tensor<2> {
    let (y, a) = (r.y(), r.args);
    let p = if r.from_logits {
        sigmoid(r.output.clone())
    } else {
        r.output.clone()
    };
    let (log_p, log_not_p) = r.log_sigmoids();
    let not_y = y.clone().neg().add_scalar(1.0);
    let bce = (y.clone() * log_p + not_y.clone() * log_not_p).neg();
    let p_t = y.clone() * p.clone() + not_y.clone() * p.neg().add_scalar(1.0);
    let mut focal = p_t.neg().add_scalar(1.0).powf_scalar(a.gamma) * bce;
    if a.apply_class_balancing {
        focal = focal * (y.mul_scalar(a.alpha) + not_y.mul_scalar(1.0 - a.alpha));
    }
    focal.mean_dim(1)
}

fn categorical_focal(r: &Rows) -> Tensor<2> {
    let a = r.args;
    let p = if r.from_logits {
        softmax(r.output.clone(), 1)
    } else {
        r.output.clone()
    };
    let p = clipped(normalized(p));
    let factor = p
        .clone()
        .neg()
        .add_scalar(1.0)
        .powf_scalar(a.gamma)
        .mul_scalar(a.alpha);
    (factor * r.y() * p.log()).sum_dim(1).neg()
}

const NONE: &[&str] = &[];
const SMOOTHING: &[&str] = &["label_smoothing"];
const FOCAL: &[&str] = &["label_smoothing", "alpha", "gamma"];

const fn values(
    name: &'static str,
    aliases: &'static [&'static str],
    rows: fn(&Rows) -> Tensor<2>,
) -> LossDef {
    LossDef {
        name,
        aliases,
        family: Family::Values,
        labels: LabelKind::Dense,
        args: NONE,
        classes: false,
        rows,
    }
}

/// Every built-in loss. The first four are [`super::LossKind`]'s shorthands, by index.
pub const LOSSES: &[LossDef] = &[
    LossDef {
        name: "sparse_categorical_crossentropy",
        aliases: NONE,
        family: Family::Softmax,
        labels: LabelKind::Sparse,
        args: NONE,
        classes: true,
        rows: sparse_crossentropy,
    },
    LossDef {
        name: "categorical_crossentropy",
        aliases: NONE,
        family: Family::Softmax,
        labels: LabelKind::Dense,
        args: SMOOTHING,
        classes: true,
        rows: |r| (r.log_probs() * r.y()).sum_dim(1).neg(),
    },
    LossDef {
        name: "binary_crossentropy",
        aliases: &["bce"],
        family: Family::Sigmoid,
        labels: LabelKind::Dense,
        args: SMOOTHING,
        classes: false,
        rows: binary_crossentropy,
    },
    values("mean_squared_error", &["mse"], |r| {
        r.error().square().mean_dim(1)
    }),
    values("mean_absolute_error", &["mae"], |r| {
        r.error().abs().mean_dim(1)
    }),
    values("mean_absolute_percentage_error", &["mape"], |r| {
        let y = r.y();
        let scale = y.clone().abs().clamp_min(EPSILON);
        ((y - r.output.clone()) / scale)
            .abs()
            .mean_dim(1)
            .mul_scalar(100.0)
    }),
    values("mean_squared_logarithmic_error", &["msle"], |r| {
        let log1p = |t: Tensor<2>| t.clamp_min(EPSILON).add_scalar(1.0).log();
        (log1p(r.output.clone()) - log1p(r.y()))
            .square()
            .mean_dim(1)
    }),
    LossDef {
        args: &["delta"],
        ..values("huber", NONE, huber)
    },
    values("log_cosh", NONE, |r| {
        let x = r.error();
        (x.clone() + softplus(x.mul_scalar(-2.0), 1.0))
            .sub_scalar(std::f64::consts::LN_2)
            .mean_dim(1)
    }),
    values("kl_divergence", &["kld"], kl_divergence),
    values("poisson", NONE, |r| {
        let p = r.output.clone();
        (p.clone() - r.y() * p.add_scalar(EPSILON).log()).mean_dim(1)
    }),
    values("hinge", NONE, |r| margin(r).mean_dim(1)),
    values("squared_hinge", NONE, |r| margin(r).square().mean_dim(1)),
    values("categorical_hinge", NONE, categorical_hinge),
    values("cosine_similarity", NONE, |r| {
        (unit(r.y()) * unit(r.output.clone())).sum_dim(1).neg()
    }),
    LossDef {
        name: "binary_focal_crossentropy",
        aliases: NONE,
        family: Family::Sigmoid,
        labels: LabelKind::Dense,
        args: &["label_smoothing", "alpha", "gamma", "apply_class_balancing"],
        classes: false,
        rows: binary_focal,
    },
    LossDef {
        name: "categorical_focal_crossentropy",
        aliases: NONE,
        family: Family::Softmax,
        labels: LabelKind::Dense,
        args: FOCAL,
        classes: true,
        rows: categorical_focal,
    },
];

/// The loss named `name` (or an alias).
pub fn find(name: &str) -> Option<&'static LossDef> {
    LOSSES
        .iter()
        .find(|d| d.name == name || d.aliases.contains(&name))
}

/// The names for "allowed: ..." lists: `name (alias ...)`, comma-separated.
pub fn names() -> String {
    LOSSES
        .iter()
        .map(|d| match d.aliases {
            [] => d.name.to_string(),
            a => format!("{} (alias {})", d.name, a.join(", ")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
