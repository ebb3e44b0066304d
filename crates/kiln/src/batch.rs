//! The one place where host batches become device tensors.
//!
//! A batch is a [`kiln_data::Element`] with a features component (`[batch, ...]`, Keras'
//! channels-last layout for images) and a labels component. Here the features are converted to
//! `float32` and images are transposed from NHWC (`[batch, height, width, channels]`, as Keras
//! users write them) to NCHW (`[batch, channels, height, width]`, as Burn's convolution wants
//! them); labels take the form the loss needs.

use burn::prelude::*;
use kiln_data::{Array, Element};

use crate::compile::{Compiled, Labels, LossSpec};
use crate::error::{KilnError, Result};
use crate::guards::{BatchOrigin, NumericsGuard};
use crate::model::{Act, ModelSpec, keras_shape};

pub use crate::names::{FEATURES, LABELS, SAMPLE_WEIGHT};

/// The batch components that feed a model with several `Input`s: the Inputs' names, in
/// order (Keras' dict inputs); `None` for a model with one Input, which takes [`FEATURES`].
pub fn input_components(spec: &ModelSpec) -> Option<Vec<String>> {
    (spec.inputs().len() > 1).then(|| spec.inputs().iter().map(|(n, _)| n.clone()).collect())
}

/// A batch's labels on the host, for metrics.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostLabels {
    /// Class index per row (argmax for dense targets).
    pub classes: Vec<i64>,
    /// Dense targets `[rows, units]` row-major, empty for sparse labels.
    pub targets: Vec<f32>,
}

/// A batch on the device, plus the host copies that metrics need.
#[derive(Debug, Clone)]
pub struct DeviceBatch {
    /// Features, in the network's layout (the first Input's, for a model with several).
    pub x: Act,
    /// The other Inputs' features, in the model's order (empty for a model with one Input).
    pub more: Vec<Act>,
    /// Labels for the loss (absent for prediction).
    pub labels: Option<Labels>,
    /// Class index per example (argmax for dense targets), for categorical metrics.
    pub classes: Vec<i64>,
    /// Dense targets `[batch, units]` row-major (binary metrics), empty for sparse labels.
    pub targets: Vec<f32>,
    /// For a model with several outputs, each output's host labels in `outputs` order
    /// (`classes` and `targets` are then empty); empty for a model with one output.
    pub outputs: Vec<HostLabels>,
    /// Number of examples.
    pub size: usize,
    /// Per-example loss weights `[batch]` (the [`SAMPLE_WEIGHT`] component), when the batch
    /// has labels and weights.
    pub sample_weight: Option<Tensor<1>>,
}

impl DeviceBatch {
    /// Every Input's features, in the model's order (what `Network::forward_graph` takes).
    pub fn inputs(x: Act, more: Vec<Act>) -> Vec<Act> {
        let mut all = Vec::with_capacity(1 + more.len());
        all.push(x);
        all.extend(more);
        all
    }

    /// A batch of no examples: what a worker whose input shard is exhausted steps with while
    /// the others still have data. Its tensors are one zero example of `spec`'s input and
    /// `loss`'s label kind, which nothing reads at size 0.
    pub fn empty(spec: &ModelSpec, compiled: &Compiled, device: &Device) -> Result<DeviceBatch> {
        let x = zeros_like_input(spec.input_shape(), device)?;
        let units: usize = spec.output_shape().iter().product();
        let labels = if compiled.loss.sparse_labels() {
            Labels::Sparse(Tensor::<1, Int>::zeros([1], device))
        } else {
            Labels::Dense(Tensor::<2>::zeros([1, units], device))
        };
        let more = spec.inputs()[1..]
            .iter()
            .map(|(_, shape)| zeros_like_input(shape, device))
            .collect::<Result<_>>()?;
        Ok(DeviceBatch {
            x,
            more,
            labels: Some(labels),
            classes: Vec::new(),
            targets: Vec::new(),
            outputs: Vec::new(),
            size: 0,
            sample_weight: None,
        })
    }
}

/// One zero example of an Input of `shape`, as a network input.
fn zeros_like_input(shape: &[usize], device: &Device) -> Result<Act> {
    let per: usize = shape.iter().product();
    let mut dims = vec![1];
    dims.extend_from_slice(shape);
    let x = Array::new(dims, kiln_data::Buffer::F32(vec![0.0; per]))
        .map_err(|e| KilnError::Shape(e.to_string()))?;
    Ok(input_act(&x, shape, "", device)?.0)
}

/// Features `[batch, ...]` as a network input for `spec`'s (first) Input, on `device`.
///
/// # Errors
/// [`KilnError::Shape`] when an example does not have `spec.input_shape()`'s element count.
pub fn features(x: &Array, spec: &ModelSpec, device: &Device) -> Result<(Act, usize)> {
    input_act(x, spec.input_shape(), "", device)
}

/// The batch's features for every Input of `spec`: the [`FEATURES`] component for a model
/// with one Input, else the components named like the Inputs ([`input_components`]).
fn all_features(el: &Element, spec: &ModelSpec, device: &Device) -> Result<(Act, Vec<Act>, usize)> {
    let Some(names) = input_components(spec) else {
        let (x, size) = features(el.require(FEATURES)?, spec, device)?;
        return Ok((x, Vec::new(), size));
    };
    let mut acts = Vec::with_capacity(names.len());
    let mut size = None;
    for (name, (_, shape)) in names.iter().zip(spec.inputs()) {
        let array = el.get(name).ok_or_else(|| {
            KilnError::Shape(format!(
                "the model's Input \"{name}\" takes the batch component of that name, which \
                 the batch lacks (components: {:?}); name the Inputs after the data's components",
                el.names().collect::<Vec<_>>()
            ))
        })?;
        let (act, n) = input_act(array, shape, name, device)?;
        if size.is_some_and(|s| s != n) {
            return Err(KilnError::Shape(format!(
                "the batch components of the model's Inputs hold different numbers of examples \
                 ({} and {n} for \"{name}\")",
                size.unwrap_or(0)
            )));
        }
        size = Some(n);
        acts.push(act);
    }
    let x = acts.remove(0);
    Ok((x, acts, size.unwrap_or(0)))
}

/// `x` (`[batch, ...]`) as a network input of Keras shape `want`; `name` is the Input's name
/// for errors (empty for a model with one Input).
fn input_act(x: &Array, want: &[usize], name: &str, device: &Device) -> Result<(Act, usize)> {
    let shape = x.shape();
    let input = if name.is_empty() {
        "the model's Input".to_string()
    } else {
        format!("the model's Input \"{name}\"")
    };
    let per: usize = want.iter().product();
    let batch = shape.first().copied().unwrap_or(0);
    let have: usize = shape.iter().skip(1).product();
    if shape.is_empty() || have != per {
        return Err(KilnError::Shape(format!(
            "input examples have shape {} but {input} expects {}; change `shape` of the Input layer or the data",
            keras_shape(shape.get(1..).unwrap_or(&[])),
            keras_shape(want)
        )));
    }
    let values = match x.data() {
        kiln_data::Buffer::F32(v) => v.clone(),
        other => other
            .try_to_f32()
            .map_err(|_| not_numeric(FEATURES, "features", x.dtype()))?,
    };
    let act = match *want {
        [f] => Act::Flat(Tensor::from_data(
            TensorData::new(values, [batch, f]),
            device,
        )),
        [s, f] => Act::Seq(Tensor::from_data(
            TensorData::new(values, [batch, s, f]),
            device,
        )),
        [h, w, c] => {
            let nchw = if c == 1 {
                values
            } else {
                nhwc_to_nchw(&values, [batch, h, w, c])
            };
            Act::Image(Tensor::from_data(
                TensorData::new(nchw, [batch, c, h, w]),
                device,
            ))
        }
        [d, h, w, c] => {
            // NDHWC is NHWC over `d * h` rows.
            let ncdhw = nhwc_to_nchw(&values, [batch, d * h, w, c]);
            Act::Volume(Tensor::from_data(
                TensorData::new(ncdhw, [batch, c, d, h, w]),
                device,
            ))
        }
        _ => unreachable!("Input shapes have 1 to 4 axes"),
    };
    Ok((act, batch))
}

/// The error for a batch component the model cannot take as numbers (a `string` feature).
fn not_numeric(component: &str, role: &str, dtype: kiln_data::DType) -> KilnError {
    KilnError::Shape(format!(
        "the {role} (batch component \"{component}\") are {dtype} values, which a model cannot \
         take: parse or encode them into numbers in the input pipeline (a map op, or a numeric \
         column default / feature dtype), or choose another component as the pipeline's {component}"
    ))
}

/// Transposes `[n, h, w, c]` to `[n, c, h, w]`.
pub fn nhwc_to_nchw(v: &[f32], [n, h, w, c]: [usize; 4]) -> Vec<f32> {
    let mut out = vec![0.0; v.len()];
    for b in 0..n {
        for y in 0..h {
            for x in 0..w {
                for k in 0..c {
                    out[((b * c + k) * h + y) * w + x] = v[((b * h + y) * w + x) * c + k];
                }
            }
        }
    }
    out
}

/// Converts a batch element (`x` and, unless predicting, `y`) for the model and loss.
///
/// # Errors
/// [`KilnError::Shape`] for features that do not fit the Input, labels outside
/// `[0, units)`, or targets whose size differs from the output.
pub fn to_device(
    el: &Element,
    spec: &ModelSpec,
    compiled: &Compiled,
    device: &Device,
) -> Result<DeviceBatch> {
    convert(el, spec, compiled, device, &BatchOrigin::default())
}

/// [`to_device`] behind the input guards: `guard` checks the batch for NaN / ±Inf first
/// (`[fit] check_numerics`, see [`crate::guards`]) and numbers its examples, so that errors
/// (a non-finite value, a class label outside `[0, units)`) name the example by its index in
/// the epoch. In skip mode `el` loses the examples that hold a non-finite value (it is then the
/// batch the step sees, e.g. for a replay); `None` when none is left.
///
/// # Errors
/// [`KilnError::NonFinite`] in raise mode; otherwise as [`to_device`].
pub fn to_device_guarded(
    el: &mut Element,
    spec: &ModelSpec,
    compiled: &Compiled,
    device: &Device,
    guard: &mut NumericsGuard,
) -> Result<Option<DeviceBatch>> {
    match guard.admit(el)? {
        Some(origin) => convert(el, spec, compiled, device, &origin).map(Some),
        None => Ok(None),
    }
}

/// The batch components that hold the labels: [`LABELS`] for a model with one output, the
/// output layers' names for a model with several (Keras' dict labels, `fit(x, {"class": ...,
/// "value": ...})`).
pub fn label_components(spec: &ModelSpec) -> Vec<String> {
    if spec.has_several_outputs() {
        spec.output_names()
    } else {
        vec![LABELS.to_string()]
    }
}

/// [`to_device`], naming rows in errors as `origin` says.
fn convert(
    el: &Element,
    spec: &ModelSpec,
    compiled: &Compiled,
    device: &Device,
    origin: &BatchOrigin,
) -> Result<DeviceBatch> {
    let (x, more, size) = all_features(el, spec, device)?;
    let mut batch = DeviceBatch {
        x,
        more,
        labels: None,
        classes: vec![],
        targets: vec![],
        outputs: vec![],
        size,
        sample_weight: None,
    };
    let components = label_components(spec);
    // Prediction: no labels at all.
    if components.iter().all(|c| el.get(c).is_none()) {
        return Ok(batch);
    }
    let mut labels = Vec::with_capacity(components.len());
    for (k, component) in components.iter().enumerate() {
        let y = el.get(component).ok_or_else(|| {
            KilnError::Shape(format!(
                "the batch has no labels for output \"{component}\" (component \
                 \"{component}\"); a model with several outputs takes each output's labels \
                 from the component named like it"
            ))
        })?;
        let head = Head {
            component,
            shape: spec.shape_after(spec.output_layers()[k]),
            loss: compiled.loss_of_output(k),
        };
        let (l, host) = head.labels(y, size, origin, device)?;
        labels.push(l);
        batch.outputs.push(host);
    }
    batch.sample_weight = sample_weights(el, size, spec.output_positions(), device)?;
    if spec.has_several_outputs() {
        batch.labels = Some(Labels::Outputs(labels));
    } else {
        let host = batch.outputs.pop().expect("one output");
        (batch.classes, batch.targets) = (host.classes, host.targets);
        batch.labels = labels.pop();
    }
    Ok(batch)
}

/// One output's labels: the component they come from, the output's shape and its loss.
struct Head<'a> {
    component: &'a str,
    shape: &'a [usize],
    loss: &'a LossSpec,
}

impl Head<'_> {
    fn units(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// One label (or target row) per output position: `(steps,)` labels for a `(steps,
    /// classes)` output.
    fn positions(&self) -> usize {
        crate::model::positions_of(self.shape)
    }

    /// The labels `y` of a batch of `size` examples as the loss takes them, and their host
    /// copies for the metrics.
    fn labels(
        &self,
        y: &Array,
        size: usize,
        origin: &BatchOrigin,
        device: &Device,
    ) -> Result<(Labels, HostLabels)> {
        let (units, positions) = (self.units(), self.positions());
        let rows = size * positions;
        let per_example = y.len() / size.max(1);
        if self.loss.sparse_labels() {
            if per_example != positions || y.len() != rows {
                return Err(KilnError::Shape(format!(
                    "{} needs one integer class label per output position ({} per example for \
                     the output {}), got labels \"{}\" of shape {:?}; use \
                     categorical_crossentropy for one-hot labels",
                    self.loss.name(),
                    positions,
                    keras_shape(self.shape),
                    self.component,
                    y.shape()
                )));
            }
            let classes = self.classes(y, origin)?;
            let t = Tensor::<1, Int>::from_data(TensorData::new(classes.clone(), [rows]), device);
            let host = HostLabels {
                classes,
                targets: vec![],
            };
            return Ok((Labels::Sparse(t), host));
        }
        let class_labels = y.dtype().is_integer() && per_example == positions;
        let (classes, targets) = if class_labels && units > 1 {
            // Integer labels for a dense loss: one-hot encode (Keras would ask for
            // to_categorical).
            let classes = self.classes(y, origin)?;
            let mut t = vec![0.0f32; rows * units];
            for (i, &c) in classes.iter().enumerate() {
                t[i * units + c as usize] = 1.0;
            }
            (classes, t)
        } else {
            let t = y
                .data()
                .try_to_f32()
                .map_err(|_| not_numeric(self.component, "labels", y.dtype()))?;
            if t.len() != rows * units {
                return Err(KilnError::Shape(format!(
                    "labels \"{}\" have {} values per example but the model's output {} has {}",
                    self.component,
                    per_example,
                    keras_shape(self.shape),
                    positions * units
                )));
            }
            let classes = t
                .chunks_exact(units)
                .map(|r| crate::compile::argmax(r) as i64)
                .collect();
            (classes, t)
        };
        let dense = Tensor::<2>::from_data(TensorData::new(targets.clone(), [rows, units]), device);
        Ok((Labels::Dense(dense), HostLabels { classes, targets }))
    }

    /// Integer class labels, each checked against `[0, units)`: an index outside makes
    /// TensorFlow's GPU kernels return NaN silently, and the one-hot encoding write out of
    /// bounds.
    fn classes(&self, y: &Array, origin: &BatchOrigin) -> Result<Vec<i64>> {
        let classes = y
            .data()
            .try_to_i64()
            .map_err(|_| not_numeric(self.component, "labels", y.dtype()))?;
        let (units, positions) = (self.units(), self.positions());
        match classes.iter().position(|&c| c < 0 || c as usize >= units) {
            Some(i) => {
                let (holder, layer) = if self.component == LABELS {
                    (
                        format!("the model has {units} output units"),
                        "the last layer's",
                    )
                } else {
                    let c = self.component;
                    (format!("output \"{c}\" has {units} units"), "that layer's")
                };
                Err(KilnError::Shape(format!(
                    "label {} of {} is outside [0, {units}): {holder} ({units} classes); fix \
                     the labels, or set {layer} `units` to the number of classes",
                    classes[i],
                    origin.describe(i / positions),
                )))
            }
            None => Ok(classes),
        }
    }
}

/// The [`SAMPLE_WEIGHT`] component of `el` as a `[size * positions]` tensor (each example's
/// weight repeated over its output positions, as Keras applies a `[batch, 1, ...]` weight), if
/// present.
///
/// # Errors
/// [`KilnError::Shape`] when it is not numeric or has other than one value per example.
fn sample_weights(
    el: &Element,
    size: usize,
    positions: usize,
    device: &Device,
) -> Result<Option<Tensor<1>>> {
    let Some(w) = el.get(SAMPLE_WEIGHT) else {
        return Ok(None);
    };
    let values = w
        .data()
        .try_to_f32()
        .map_err(|_| not_numeric(SAMPLE_WEIGHT, "sample weights", w.dtype()))?;
    if values.len() != size || w.shape().first() != Some(&size) {
        return Err(KilnError::Shape(format!(
            "sample weights (batch component \"{SAMPLE_WEIGHT}\") have shape {:?} but the batch \
             has {size} examples: give one weight per example, shape [{size}] or [{size}, 1]",
            w.shape()
        )));
    }
    let per_row: Vec<f32> = if positions == 1 {
        values
    } else {
        values
            .iter()
            .flat_map(|&v| std::iter::repeat_n(v, positions))
            .collect()
    };
    let n = per_row.len();
    Ok(Some(Tensor::from_data(
        TensorData::new(per_row, [n]),
        device,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `compile(loss=loss)` for `spec` (the optimizer does not matter here).
    fn compiled(spec: &ModelSpec, loss: LossSpec) -> Compiled {
        let optimizer =
            crate::compile::OptimizerSpec::from_toml(&toml::Value::from("sgd")).unwrap();
        Compiled::new(spec, optimizer, loss, &[]).unwrap()
    }

    #[test]
    fn string_features_and_labels_are_errors_not_panics() {
        use crate::compile::LossSpec;
        let spec = ModelSpec::from_toml(
            &toml::from_str(
                "layers = [{ type = \"Input\", shape = [1] }, { type = \"Dense\", units = 2 }]",
            )
            .unwrap(),
        )
        .unwrap();
        let device = Device::flex();
        let strings = Array::new(
            vec![2],
            kiln_data::Buffer::String(vec![b"a".to_vec(), b"b".to_vec()]),
        )
        .unwrap();
        let numbers = Array::new(vec![2, 1], kiln_data::Buffer::F32(vec![1.0, 2.0])).unwrap();
        let loss =
            LossSpec::from_toml(&toml::Value::from("sparse_categorical_crossentropy")).unwrap();
        let el = Element::new().with(FEATURES, strings.clone());
        let e = to_device(&el, &spec, &compiled(&spec, loss), &device)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("the features (batch component \"x\") are string values"),
            "{e}"
        );
        let el = Element::new()
            .with(FEATURES, numbers.clone())
            .with(LABELS, strings.clone());
        let e = to_device(&el, &spec, &compiled(&spec, loss), &device)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("the labels (batch component \"y\") are string values"),
            "{e}"
        );
        let mse = LossSpec::from_toml(&toml::Value::from("mse")).unwrap();
        let el = Element::new().with(FEATURES, numbers).with(LABELS, strings);
        assert!(to_device(&el, &spec, &compiled(&spec, mse), &device).is_err());
    }

    #[test]
    fn sample_weights_need_one_value_per_example() {
        let spec = ModelSpec::from_toml(
            &toml::from_str(
                "layers = [{ type = \"Input\", shape = [1] }, { type = \"Dense\", units = 2 }]",
            )
            .unwrap(),
        )
        .unwrap();
        let loss =
            LossSpec::from_toml(&toml::Value::from("sparse_categorical_crossentropy")).unwrap();
        let device = Device::flex();
        let el = |w: Array| {
            Element::new()
                .with(
                    FEATURES,
                    Array::new(vec![2, 1], kiln_data::Buffer::F32(vec![1.0, 2.0])).unwrap(),
                )
                .with(
                    LABELS,
                    Array::new(vec![2], kiln_data::Buffer::I64(vec![0, 1])).unwrap(),
                )
                .with(SAMPLE_WEIGHT, w)
        };
        let column = Array::new(vec![2, 1], kiln_data::Buffer::F64(vec![0.5, 2.0])).unwrap();
        let b = to_device(&el(column), &spec, &compiled(&spec, loss), &device).unwrap();
        let w = b
            .sample_weight
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert_eq!(w, vec![0.5, 2.0]);
        let three = Array::new(vec![3], kiln_data::Buffer::F32(vec![1.0; 3])).unwrap();
        let e = to_device(&el(three), &spec, &compiled(&spec, loss), &device)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("sample weights (batch component \"sample_weight\") have shape [3] but the batch has 2 examples"),
            "{e}"
        );
    }

    #[test]
    fn nhwc_to_nchw_moves_channels_first() {
        // One 1x2 image with 3 channels: pixels (a0 a1 a2), (b0 b1 b2).
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(
            nhwc_to_nchw(&v, [1, 1, 2, 3]),
            vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
    }
}
