//! The NaN report: when a training step's loss is not finite, replay that step on its batch with
//! a check after every stage and name the first tensor that is not finite.
//!
//! TensorFlow's answer to the same question is `tf.debugging.enable_check_numerics()`
//! (`tensorflow/python/debug/lib/check_numerics_callback.py`), which raises at the first op
//! whose output holds a NaN or an Inf. [`diagnose`] does that once, after the fact, in the order
//! the step computes: the batch's arrays, then for each layer its weights and its output, then
//! the loss, then the gradient of each trainable weight. Weights carry Keras' names
//! (`dense_1/kernel`, as [`crate::model::weights::keras_weights`]). The report adds the step's
//! context (epoch, step, learning rate, the recent gradient norms) and the remedies of
//! TensorFlow's and Keras' advice for NaN losses that apply (lower the learning rate, clip the
//! global norm, check the inputs, compute the loss from logits, loss scaling under float16),
//! and saves the batch as `.npy` files so the step can be replayed.

use std::fmt;
use std::path::{Path, PathBuf};

use burn::module::{Module, Param};
use burn::prelude::*;
use burn::tensor::{DType, Gradients};
use kiln_data::{Array, Buffer, Element};
use serde::Serialize;

use super::GradNormSample;
use crate::compile::{Compiled, Family};
use crate::error::{KilnError, Result};
use crate::model::{Act, LayerParams, ModelSpec, Network};

/// The file [`diagnose`] writes the report to, inside its directory.
pub const REPORT_FILE: &str = "nan_report.json";

/// What the fit loop knows about the step that produced a non-finite loss.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepInfo {
    /// Epoch, 0-based (as Keras' `History.epoch`).
    pub epoch: usize,
    /// The step (batch) number, as the fit loop counts it.
    pub step: u64,
    /// The learning rate the step used.
    pub learning_rate: f64,
    /// Sampled global gradient norms `sqrt(sum of squares of every gradient)` of the last
    /// steps, oldest first (the trend up to the failure; see [`super::GradNormTrend`]).
    pub recent_grad_norms: Vec<GradNormSample>,
    /// The optimizer's `global_clipnorm`, if set.
    pub global_clipnorm: Option<f64>,
}

/// Which tensor of the step a [`TensorCheck`] looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorKind {
    /// A component of the batch (`x`, `y`), as the pipeline delivered it.
    Input,
    /// A layer's weight before the step.
    Weight,
    /// A layer's output (after its activation).
    LayerOutput,
    /// The mean loss over the batch.
    Loss,
    /// The gradient of the loss with respect to a trainable weight.
    Gradient,
}

impl TensorKind {
    /// `input`, `weight`, `layer output`, `loss`, `gradient`.
    pub fn words(self) -> &'static str {
        match self {
            TensorKind::Input => "input",
            TensorKind::Weight => "weight",
            TensorKind::LayerOutput => "layer output",
            TensorKind::Loss => "loss",
            TensorKind::Gradient => "gradient",
        }
    }
}

/// Counts of non-finite values in one tensor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorCheck {
    /// What the tensor is.
    pub kind: TensorKind,
    /// The batch component, the layer's name, `loss`, or the weight's Keras name.
    pub name: String,
    /// Shape in Keras' layout (images `[batch, height, width, channels]`, conv kernels
    /// `[kh, kw, in, out]`).
    pub shape: Vec<usize>,
    /// Element type (`float32`, `float16`, `uint8`…).
    pub dtype: String,
    /// NaN values.
    pub nan: usize,
    /// +Inf and -Inf values.
    pub inf: usize,
    /// Largest finite absolute value (0 when there is none): how close to overflow it is.
    pub max_abs: f64,
}

impl TensorCheck {
    /// True when the tensor holds no NaN or Inf.
    pub fn is_finite(&self) -> bool {
        self.nan == 0 && self.inf == 0
    }

    fn of_values(
        kind: TensorKind,
        name: impl Into<String>,
        shape: Vec<usize>,
        dtype: String,
        values: impl Iterator<Item = f64>,
    ) -> TensorCheck {
        let (mut nan, mut inf, mut max_abs) = (0, 0, 0.0f64);
        for v in values {
            if v.is_nan() {
                nan += 1;
            } else if v.is_infinite() {
                inf += 1;
            } else {
                max_abs = max_abs.max(v.abs());
            }
        }
        TensorCheck {
            kind,
            name: name.into(),
            shape,
            dtype,
            nan,
            inf,
            max_abs,
        }
    }

    fn of_tensor<const D: usize>(
        kind: TensorKind,
        name: impl Into<String>,
        shape: Vec<usize>,
        t: Tensor<D>,
    ) -> TensorCheck {
        let dtype = dtype_name(t.dtype());
        let values = t
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .expect("float tensors convert to f32");
        TensorCheck::of_values(kind, name, shape, dtype, values.into_iter().map(f64::from))
    }
}

impl fmt::Display for TensorCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} `{}` {:?} {}: {} NaN, {} Inf (largest finite |value| {:e})",
            self.kind.words(),
            self.name,
            self.shape,
            self.dtype,
            self.nan,
            self.inf,
            self.max_abs
        )
    }
}

/// One piece of advice, with a stable key for programs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Remedy {
    /// `check_inputs`, `restore_weights`, `lower_learning_rate`, `global_clipnorm`,
    /// `from_logits` or `loss_scaling`.
    pub key: &'static str,
    /// What to do, with kiln's config key.
    pub advice: String,
}

/// What [`diagnose`] found. Renders as JSON ([`NanReport::to_json`], saved as
/// [`REPORT_FILE`]) and as a text block for the screen (`Display`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NanReport {
    /// Epoch, 0-based.
    pub epoch: usize,
    /// The failing step.
    pub step: u64,
    /// The learning rate the step used.
    pub learning_rate: f64,
    /// Sampled global gradient norms of the last steps, oldest first, the failing step last
    /// when it was sampled (JSON `null` for a non-finite one: float32's sum of squares
    /// overflows for norms above about 1.8e19).
    pub recent_grad_norms: Vec<GradNormSample>,
    /// The replayed step's loss.
    pub loss: f64,
    /// The replayed step's global gradient norm (NaN when some gradient is not finite, or
    /// gradients were not computed).
    pub grad_norm: f64,
    /// False when the network was not on an autodiff device, so gradients were not replayed.
    pub gradients_checked: bool,
    /// The first tensor, in computation order, holding a NaN or Inf; `None` when the replay
    /// stayed finite (the failure then depends on the step's randomness, e.g. Dropout, or on
    /// other weights than those given).
    pub first_non_finite: Option<TensorCheck>,
    /// Every tensor checked, in computation order.
    pub tensors: Vec<TensorCheck>,
    /// Advice that applies, most likely first.
    pub remedies: Vec<Remedy>,
    /// The batch's components as `.npy` files (`batch_<component>.npy`), for a replay.
    pub batch_files: Vec<PathBuf>,
}

impl NanReport {
    /// The report as JSON (non-finite numbers become `null`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("the report serializes")
    }

    /// Writes [`NanReport::to_json`] to `dir/nan_report.json` (atomically) and returns the path.
    ///
    /// # Errors
    /// [`KilnError::Io`] when the file cannot be written.
    pub fn save(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join(REPORT_FILE);
        let text = serde_json::to_string_pretty(&self.to_json()).expect("JSON renders");
        crate::run_dir::write_atomic(&path, text.as_bytes())?;
        Ok(path)
    }
}

/// Replays the step of `info` on `batch` (as the fit loop gave it to the step: `x` and `y`) with
/// `net`'s weights before the step, checking every tensor; saves the batch as
/// `dir/batch_<component>.npy` and the report as `dir/nan_report.json` (creating `dir`).
///
/// `net` should be the training network (on an autodiff device, as [`crate::Model::network`]
/// returns it); otherwise gradients are not checked. The replay runs in training mode, so
/// Dropout draws new masks: a failure that depends on them may not reproduce.
///
/// # Errors
/// [`KilnError::Io`] when `dir` or its files cannot be written; [`KilnError::Shape`] when the
/// batch does not fit the model or has no labels.
pub fn diagnose(
    net: &Network,
    spec: &ModelSpec,
    compiled: &Compiled,
    batch: &Element,
    info: &StepInfo,
    dir: &Path,
) -> Result<NanReport> {
    std::fs::create_dir_all(dir).map_err(|e| KilnError::io(dir, e))?;
    let batch_files = save_batch(batch, dir)?;
    let mut tensors: Vec<TensorCheck> = batch
        .iter()
        .filter_map(|(name, a)| check_array(name, a))
        .collect();

    let device = net.devices().first().cloned().unwrap_or_else(Device::flex);
    let b = crate::batch::to_device(batch, spec, compiled, &device)?;
    let labels = b.labels.ok_or_else(|| {
        KilnError::Shape(
            "the NaN report replays a training step: its batch needs labels (component \"y\")"
                .into(),
        )
    })?;
    let inputs = crate::batch::DeviceBatch::inputs(b.x, b.more);
    let fwd = net.forward_graph(spec, inputs, true, &mut |i, _, out| {
        let layer = &spec.layers()[i];
        param_checks(&mut tensors, &layer.name, &net.layers[i], None);
        tensors.push(check_act(&layer.name, out));
    });
    let had_logits = fwd.logits.iter().any(Option::is_some);
    let (loss, _) = compiled.losses(fwd.output, fwd.logits, &labels, None);
    let loss_check = TensorCheck::of_tensor(TensorKind::Loss, "loss", vec![], loss.clone());
    let loss_value = loss.clone().into_scalar::<f32>() as f64;
    tensors.push(loss_check);
    let gradients_checked = loss.is_tracked();
    let mut grad_norm = f64::NAN;
    if gradients_checked {
        let grads = loss.backward();
        let start = tensors.len();
        for (layer, p) in spec.layers().iter().zip(&net.layers) {
            param_checks(&mut tensors, &layer.name, p, Some(&grads));
        }
        grad_norm = global_norm(net, &grads, &tensors[start..]);
    }

    let first_non_finite = tensors.iter().find(|t| !t.is_finite()).cloned();
    let remedies = remedies(
        compiled,
        info,
        first_non_finite.as_ref(),
        &tensors,
        had_logits,
    );
    let report = NanReport {
        epoch: info.epoch,
        step: info.step,
        learning_rate: info.learning_rate,
        recent_grad_norms: info.recent_grad_norms.clone(),
        loss: loss_value,
        grad_norm,
        gradients_checked,
        first_non_finite,
        tensors,
        remedies,
        batch_files,
    };
    report.save(dir)?;
    Ok(report)
}

/// Writes each component of `batch` to `dir/batch_<component>.npy`.
fn save_batch(batch: &Element, dir: &Path) -> Result<Vec<PathBuf>> {
    batch
        .iter()
        .map(|(name, a)| {
            let safe: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let path = dir.join(format!("batch_{safe}.npy"));
            crate::run_dir::write_atomic(&path, &kiln_data::npy::encode_npy(a))?;
            Ok(path)
        })
        .collect()
}

fn dtype_name(d: DType) -> String {
    match d {
        DType::F64 => "float64".into(),
        DType::F32 | DType::Flex32 => "float32".into(),
        DType::F16 => "float16".into(),
        DType::BF16 => "bfloat16".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Counts of a numeric batch component (strings are skipped).
fn check_array(name: &str, a: &Array) -> Option<TensorCheck> {
    let shape = a.shape().to_vec();
    let dtype = a.dtype().name().to_string();
    let check = |values: &mut dyn Iterator<Item = f64>| {
        TensorCheck::of_values(
            TensorKind::Input,
            name,
            shape.clone(),
            dtype.clone(),
            values,
        )
    };
    Some(match a.data() {
        Buffer::F32(v) => check(&mut v.iter().map(|&x| f64::from(x))),
        // As the model sees it: converted to float32.
        Buffer::F64(v) => check(&mut v.iter().map(|&x| f64::from(x as f32))),
        Buffer::String(_) => return None,
        other => check(&mut other.to_f32().into_iter().map(f64::from)),
    })
}

/// A layer's output, in Keras' layout.
fn check_act(layer: &str, out: &Act) -> TensorCheck {
    let kind = TensorKind::LayerOutput;
    match out.clone() {
        Act::Flat(t) => TensorCheck::of_tensor(kind, layer, t.dims().to_vec(), t),
        Act::Seq(t) => TensorCheck::of_tensor(kind, layer, t.dims().to_vec(), t),
        Act::Image(t) => {
            let [n, c, h, w] = t.dims();
            TensorCheck::of_tensor(kind, layer, vec![n, h, w, c], t)
        }
        Act::Volume(t) => {
            let [n, c, d, h, w] = t.dims();
            TensorCheck::of_tensor(kind, layer, vec![n, d, h, w, c], t)
        }
    }
}

/// The layer's weights (`grads` `None`) or the gradients of its trainable weights, with Keras'
/// names and shapes, in [`crate::model::weights::keras_weights`]' order.
fn param_checks(
    out: &mut Vec<TensorCheck>,
    layer: &str,
    p: &LayerParams,
    grads: Option<&Gradients>,
) {
    fn one<const D: usize>(
        out: &mut Vec<TensorCheck>,
        name: String,
        shape: Vec<usize>,
        p: &Param<Tensor<D>>,
        grads: Option<&Gradients>,
    ) {
        let (kind, t) = match grads {
            None => (TensorKind::Weight, Some(p.val())),
            Some(g) => (TensorKind::Gradient, p.val().grad(g)),
        };
        if let Some(t) = t {
            out.push(TensorCheck::of_tensor(kind, name, shape, t));
        }
    }
    if let Some(k) = &p.dense_kernel {
        one(
            out,
            format!("{layer}/kernel"),
            k.val().dims().to_vec(),
            k,
            grads,
        );
    }
    if let Some(k) = &p.conv_kernel {
        let [o, i, h, w] = k.val().dims();
        one(out, format!("{layer}/kernel"), vec![h, w, i, o], k, grads);
    }
    for (suffix, v) in [
        ("bias", &p.bias),
        ("gamma", &p.gamma),
        ("beta", &p.beta),
        ("moving_mean", &p.moving_mean),
        ("moving_variance", &p.moving_variance),
    ] {
        if let Some(v) = v {
            one(
                out,
                format!("{layer}/{suffix}"),
                v.val().dims().to_vec(),
                v,
                grads,
            );
        }
    }
}

/// `sqrt(sum of squares)` over every gradient (`tf.linalg.global_norm`); NaN when one of
/// `checks` (the gradients' counts) is not finite.
fn global_norm(net: &Network, grads: &Gradients, checks: &[TensorCheck]) -> f64 {
    if checks.iter().any(|c| !c.is_finite()) {
        return f64::NAN;
    }
    fn sq<const D: usize>(p: &Option<Param<Tensor<D>>>, grads: &Gradients) -> f64 {
        p.as_ref()
            .and_then(|p| p.val().grad(grads))
            .map_or(0.0, |g| {
                g.into_data()
                    .convert::<f32>()
                    .try_to_vec::<f32>()
                    .expect("float gradients convert to f32")
                    .into_iter()
                    .map(|v| f64::from(v) * f64::from(v))
                    .sum()
            })
    }
    net.layers
        .iter()
        .map(|p| {
            sq(&p.dense_kernel, grads)
                + sq(&p.conv_kernel, grads)
                + sq(&p.bias, grads)
                + sq(&p.gamma, grads)
                + sq(&p.beta, grads)
        })
        .sum::<f64>()
        .sqrt()
}

/// The advice that applies to what the replay found. Sources: TensorFlow's guidance for NaN
/// losses (lower the learning rate; clip with `global_clipnorm` / `tf.clip_by_global_norm`;
/// check the inputs with `tf.debugging.check_numerics`; loss scaling for float16,
/// https://www.tensorflow.org/guide/mixed_precision) and Keras' losses documentation
/// (`from_logits=True` is more numerically stable than a softmax or sigmoid output).
fn remedies(
    compiled: &Compiled,
    info: &StepInfo,
    first: Option<&TensorCheck>,
    tensors: &[TensorCheck],
    had_logits: bool,
) -> Vec<Remedy> {
    let mut out = Vec::new();
    let mut add = |key, advice: String| out.push(Remedy { key, advice });
    if let Some(first) = first.filter(|f| f.kind == TensorKind::Input) {
        add(
            "check_inputs",
            format!(
                "the batch itself holds {} NaN and {} Inf in component \"{}\": clean the data; \
                 `check_numerics = \"raise\"` in [fit] names the example, `\"skip\"` drops such \
                 examples (TensorFlow's tf.debugging.check_numerics)",
                first.nan, first.inf, first.name
            ),
        );
        return out;
    }
    if first.is_some_and(|f| f.kind == TensorKind::Weight) {
        add(
            "restore_weights",
            "a weight is already not finite: an earlier step diverged; resume from the last good \
             checkpoint with a lower learning rate"
                .into(),
        );
    }
    let lr = info.learning_rate;
    add(
        "lower_learning_rate",
        format!(
            "lower the learning rate (now {lr}), e.g. to {}: `learning_rate` of [compile] \
             optimizer, or a ReduceLROnPlateau / LearningRateScheduler callback",
            lr / 10.0
        ),
    );
    add(
        "global_clipnorm",
        match info.global_clipnorm {
            None => "clip gradients by their global norm: `global_clipnorm = 1.0` in [compile] \
                     optimizer (tf.clip_by_global_norm); it tames large gradients, not Inf ones"
                .into(),
            Some(c) => format!(
                "lower `global_clipnorm` (now {c}); clipping cannot repair an Inf or NaN \
                 gradient, so also lower the learning rate"
            ),
        },
    );
    let crossentropy = compiled.loss.family() != Family::Values;
    if crossentropy && !compiled.loss.from_logits && !had_logits {
        add(
            "from_logits",
            format!(
                "compute {} from logits: end the model with a linear layer and set \
                 `loss = {{ type = \"{}\", from_logits = true }}` in [compile] instead of a \
                 softmax/sigmoid output (log of a probability near 0 or 1 loses precision)",
                compiled.loss.name(),
                compiled.loss.name()
            ),
        );
    }
    if tensors.iter().any(|t| t.dtype == "float16") {
        add(
            "loss_scaling",
            "float16 overflows above 65504: train with loss scaling (Keras' LossScaleOptimizer, \
             which skips steps with Inf gradients) or with mixed_bfloat16"
                .into(),
        );
    }
    out
}

/// `step 0: 5.200e-1, step 1: 6.100e-1, step 2: 4.800e1 (x92.308 from step 0 to step 2)`: the
/// sampled norms and the growth from the first to the last.
fn trend(samples: &[GradNormSample]) -> String {
    let list: Vec<String> = samples
        .iter()
        .map(|s| format!("step {}: {:.3e}", s.step, s.norm))
        .collect();
    let mut s = list.join(", ");
    if let (Some(a), Some(b)) = (samples.first(), samples.last())
        && samples.len() > 1
        && a.norm > 0.0
        && a.norm.is_finite()
        && b.norm.is_finite()
    {
        s += &format!(
            " (x{:.3} from step {} to step {})",
            b.norm / a.norm,
            a.step,
            b.step
        );
    }
    s
}

impl fmt::Display for NanReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "NaN report, epoch {} step {}: loss {}",
            self.epoch + 1,
            self.step,
            self.loss
        )?;
        match &self.first_non_finite {
            Some(t) => writeln!(f, "  first non-finite tensor: {t}")?,
            None => writeln!(
                f,
                "  the replay of this step stayed finite: the failure depends on the step's \
                 randomness (Dropout) or on weights other than those replayed"
            )?,
        }
        writeln!(
            f,
            "  learning rate {}; replayed gradient global norm {}",
            crate::logs::short(self.learning_rate),
            self.grad_norm
        )?;
        if !self.recent_grad_norms.is_empty() {
            writeln!(
                f,
                "  recent gradient global norms (oldest first): {}",
                trend(&self.recent_grad_norms)
            )?;
        }
        let bad: Vec<&TensorCheck> = self.tensors.iter().filter(|t| !t.is_finite()).collect();
        if bad.len() > 1 {
            writeln!(f, "  non-finite tensors, in computation order:")?;
            for t in bad.iter().take(10) {
                writeln!(f, "    {t}")?;
            }
            if bad.len() > 10 {
                writeln!(f, "    … and {} more", bad.len() - 10)?;
            }
        }
        if !self.remedies.is_empty() {
            writeln!(f, "  what to try:")?;
            for r in &self.remedies {
                writeln!(f, "    - {}", r.advice)?;
            }
        }
        let files: Vec<String> = self
            .batch_files
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        write!(f, "  batch saved for replay: {}", files.join(", "))
    }
}

#[cfg(test)]
mod tests;
