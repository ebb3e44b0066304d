//! A layer's parameters: the weights a layer declares ([`WeightSpec`]: Keras' name, shape,
//! initializer, trainability and [`Storage`]) and the Burn module that holds them
//! ([`LayerParams`]), with the conversions between kiln's storage and Keras' layout. It sits
//! below `layer` (the trait) and `network` (the model), and imports neither.

use burn::module::{Module, Param};
use burn::prelude::*;

/// How a weight's first values are drawn (Keras' initializer names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WeightInit {
    /// `glorot_uniform` with Keras' fans of the weight's shape (the default for kernels).
    GlorotUniform,
    /// `zeros` (biases, `beta`, moving means).
    Zeros,
    /// `ones` (`gamma`, moving variances).
    Ones,
    /// `random_uniform(minval, maxval)` (Embedding's default is `(-0.05, 0.05)`).
    RandomUniform(f32, f32),
    /// `orthogonal` (recurrent kernels).
    Orthogonal,
    /// An LSTM's bias with `unit_forget_bias`: zeros, but ones for the forget gate (the second
    /// quarter).
    UnitForgetBias,
}

/// Where a weight lives among a layer's parameters (and so in checkpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// Rank 2 among the layer's `kernels`, any other rank flattened among its `vectors`.
    Auto,
    /// Among the `kernels` as a matrix whose rows are the first `n` axes (attention's rank-3
    /// projection kernels).
    Matrix(usize),
    /// Among the `vectors`, flattened, whatever its rank (attention's `[heads, dim]` biases).
    Vector,
    /// One of the named parameter fields of kiln's first layers (Dense, Conv2D,
    /// BatchNormalization, LayerNormalization), kept so that their checkpoints still load.
    Field(Field),
}

/// The named parameter fields of [`crate::model::LayerParams`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `dense_kernel`, `[inputs, units]`.
    DenseKernel,
    /// `conv_kernel`, held as Burn's `[out, in, kh, kw]` (handed out in Keras' layout).
    ConvKernel,
    /// `bias`.
    Bias,
    /// `gamma`.
    Gamma,
    /// `beta`.
    Beta,
    /// `moving_mean`.
    MovingMean,
    /// `moving_variance`.
    MovingVariance,
}

/// One weight of a layer.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightSpec {
    /// Keras' name inside the layer (`kernel`, `bias`, `embeddings`); the weights file and
    /// `summary()` call it `<layer name>/<name>`.
    pub name: String,
    /// Keras' shape and layout (a Dense kernel is `[inputs, units]`).
    pub shape: Vec<usize>,
    /// How it starts.
    pub init: WeightInit,
    /// Updated by the optimizer (`false`: a non-trainable weight such as a moving mean).
    pub trainable: bool,
    /// Where it is held ([`Storage::Auto`] unless the layer says otherwise).
    pub storage: Storage,
}

impl WeightSpec {
    /// A trainable weight.
    pub fn new(name: &str, shape: Vec<usize>, init: WeightInit) -> WeightSpec {
        WeightSpec {
            name: name.into(),
            shape,
            init,
            trainable: true,
            storage: Storage::Auto,
        }
    }

    /// The weight, not updated by the optimizer (a moving statistic).
    pub fn frozen(mut self) -> WeightSpec {
        self.trainable = false;
        self
    }

    /// The weight held as `storage`.
    pub fn stored(mut self, storage: Storage) -> WeightSpec {
        self.storage = storage;
        self
    }

    /// Number of values.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// Stored among the layer's `kernels` rather than its `vectors` or a named field.
    pub fn is_kernel(&self) -> bool {
        match self.storage {
            Storage::Auto => self.shape.len() == 2,
            Storage::Matrix(_) => true,
            Storage::Vector | Storage::Field(_) => false,
        }
    }
}

/// Parameters of one layer; which fields are set depends on the layer's weights and their
/// [`Storage`]. Its field names are those of kiln's checkpoints (Burn records).
#[derive(Module, Debug)]
pub struct LayerParams {
    /// Dense kernel, `[in_features, units]` (Keras' layout).
    pub dense_kernel: Option<Param<Tensor<2>>>,
    /// Conv2D kernel, `[filters, in_channels, kernel_h, kernel_w]` (Burn's layout; Keras stores
    /// `[kernel_h, kernel_w, in_channels, filters]`).
    pub conv_kernel: Option<Param<Tensor<4>>>,
    /// Bias, `[units]` or `[filters]`.
    pub bias: Option<Param<Tensor<1>>>,
    /// BatchNormalization scale, `[channels]`.
    pub gamma: Option<Param<Tensor<1>>>,
    /// BatchNormalization offset, `[channels]`.
    pub beta: Option<Param<Tensor<1>>>,
    /// BatchNormalization moving mean, `[channels]` (not trained by gradients).
    pub moving_mean: Option<Param<Tensor<1>>>,
    /// BatchNormalization moving variance, `[channels]` (not trained by gradients).
    pub moving_variance: Option<Param<Tensor<1>>>,
    /// Further kernels as matrices (Embedding tables, attention and feed-forward
    /// projections), in the order the layer's `Layer::weights` lists them.
    pub kernels: Vec<Param<Tensor<2>>>,
    /// Further weights of other ranks, flattened (attention biases, an encoder's
    /// LayerNormalization and feed-forward vectors), in the order `Layer::weights` lists them.
    pub vectors: Vec<Param<Tensor<1>>>,
}

impl LayerParams {
    pub(crate) fn empty() -> LayerParams {
        LayerParams {
            dense_kernel: None,
            conv_kernel: None,
            bias: None,
            gamma: None,
            beta: None,
            moving_mean: None,
            moving_variance: None,
            kernels: Vec::new(),
            vectors: Vec::new(),
        }
    }
}

/// Where a weight is stored in a [`LayerParams`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A named field.
    Field(Field),
    /// `kernels[k]`, as a matrix whose rows are the first `split` axes.
    Kernel(usize, usize),
    /// `vectors[v]`.
    Vector(usize),
}

/// The slot of each of `specs` (a layer's weights in declaration order): named fields as
/// they say, kernels and vectors numbered in order.
pub(crate) fn slots(specs: &[WeightSpec]) -> Vec<Slot> {
    let (mut k, mut v) = (0, 0);
    specs
        .iter()
        .map(|s| match s.storage {
            Storage::Field(f) => Slot::Field(f),
            _ if s.is_kernel() => {
                k += 1;
                let split = match s.storage {
                    Storage::Matrix(n) => n,
                    _ => 1,
                };
                Slot::Kernel(k - 1, split)
            }
            _ => {
                v += 1;
                Slot::Vector(v - 1)
            }
        })
        .collect()
}

fn param<const D: usize>(
    values: Vec<f32>,
    shape: [usize; D],
    device: &Device,
    grad: bool,
) -> Param<Tensor<D>> {
    Param::from_tensor(Tensor::from_data(TensorData::new(values, shape), device))
        .set_require_grad(grad)
}

/// `p` with its value replaced by `f(value)` (outside autodiff), keeping its id and whether
/// it requires gradients.
fn mapped<const D: usize>(
    p: Param<Tensor<D>>,
    f: impl FnOnce(Tensor<D>) -> Tensor<D>,
) -> Param<Tensor<D>> {
    p.map(|t| {
        let grad = t.is_require_grad();
        f(t.detach()).detach().set_require_grad(grad)
    })
}

fn map_slot<const D: usize>(
    slot: &mut Option<Param<Tensor<D>>>,
    f: impl FnOnce(Tensor<D>) -> Tensor<D>,
) {
    if let Some(p) = slot.take() {
        *slot = Some(mapped(p, f));
    }
}

impl LayerParams {
    fn field_vector(&self, f: Field) -> &Option<Param<Tensor<1>>> {
        match f {
            Field::Bias => &self.bias,
            Field::Gamma => &self.gamma,
            Field::Beta => &self.beta,
            Field::MovingMean => &self.moving_mean,
            Field::MovingVariance => &self.moving_variance,
            Field::DenseKernel | Field::ConvKernel => unreachable!("kernels are not vectors"),
        }
    }

    fn field_vector_mut(&mut self, f: Field) -> &mut Option<Param<Tensor<1>>> {
        match f {
            Field::Bias => &mut self.bias,
            Field::Gamma => &mut self.gamma,
            Field::Beta => &mut self.beta,
            Field::MovingMean => &mut self.moving_mean,
            Field::MovingVariance => &mut self.moving_variance,
            Field::DenseKernel | Field::ConvKernel => unreachable!("kernels are not vectors"),
        }
    }

    /// Stores weight `w` (at `slot`) from `values` in Keras' layout, requiring gradients when
    /// `grad`.
    pub(crate) fn put(
        &mut self,
        slot: Slot,
        w: &WeightSpec,
        values: Vec<f32>,
        grad: bool,
        device: &Device,
    ) {
        let n = values.len();
        match slot {
            Slot::Field(Field::DenseKernel) => {
                self.dense_kernel = Some(param(values, [w.shape[0], w.shape[1]], device, grad));
            }
            Slot::Field(Field::ConvKernel) => {
                let [kh, kw, cin, cout]: [usize; 4] =
                    w.shape[..].try_into().expect("Conv2D kernel");
                let v = hwio_to_oihw(&values, [kh, kw, cin, cout]);
                self.conv_kernel = Some(param(v, [cout, cin, kh, kw], device, grad));
            }
            Slot::Field(f) => *self.field_vector_mut(f) = Some(param(values, [n], device, grad)),
            Slot::Kernel(_, split) => {
                let rc = matrix(&w.shape, split);
                self.kernels.push(param(values, rc, device, grad));
            }
            Slot::Vector(_) => self.vectors.push(param(values, [n], device, grad)),
        }
    }

    /// Weight `w` (at `slot`) flattened in Keras' row-major layout.
    pub(crate) fn keras_flat(&self, slot: Slot, w: &WeightSpec) -> Tensor<1> {
        let n = w.size();
        match slot {
            Slot::Field(Field::ConvKernel) => {
                let k = self.conv_kernel.as_ref().expect("stored").val();
                k.permute([2, 3, 1, 0]).reshape([n])
            }
            Slot::Field(Field::DenseKernel) => self
                .dense_kernel
                .as_ref()
                .expect("stored")
                .val()
                .reshape([n]),
            Slot::Field(f) => self.field_vector(f).as_ref().expect("stored").val(),
            Slot::Kernel(k, _) => self.kernels[k].val().reshape([n]),
            Slot::Vector(v) => self.vectors[v].val(),
        }
    }

    /// Replaces weight `w` (at `slot`) by `f(its Keras-layout flat values)`.
    pub(crate) fn update(
        &mut self,
        slot: Slot,
        w: &WeightSpec,
        f: impl FnOnce(Tensor<1>) -> Tensor<1>,
    ) {
        let n = w.size();
        match slot {
            Slot::Field(Field::DenseKernel) => {
                map_slot(&mut self.dense_kernel, |t| via_flat(t, n, f));
            }
            Slot::Field(Field::ConvKernel) => map_slot(&mut self.conv_kernel, |t| {
                let [o, i, h, kw] = t.dims();
                f(t.permute([2, 3, 1, 0]).reshape([n]))
                    .reshape([h, kw, i, o])
                    .permute([3, 2, 0, 1])
            }),
            Slot::Field(field) => map_slot(self.field_vector_mut(field), f),
            Slot::Kernel(k, _) => {
                self.kernels[k] = mapped(self.kernels[k].clone(), |t| via_flat(t, n, f));
            }
            Slot::Vector(v) => self.vectors[v] = mapped(self.vectors[v].clone(), f),
        }
    }
}

/// The stored `[rows, cols]` of a weight of Keras shape `shape` whose rows are its first
/// `split` axes.
fn matrix(shape: &[usize], split: usize) -> [usize; 2] {
    [
        shape[..split].iter().product(),
        shape[split..].iter().product(),
    ]
}

/// `w` (row-major, of shape `dims`) with its axes permuted: axis `k` of the result is axis
/// `perm[k]` of `w`.
fn permuted4(w: &[f32], dims: [usize; 4], perm: [usize; 4]) -> Vec<f32> {
    let strides = [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1];
    let out_dims = perm.map(|p| dims[p]);
    let mut out = Vec::with_capacity(w.len());
    for a in 0..out_dims[0] {
        for b in 0..out_dims[1] {
            for c in 0..out_dims[2] {
                for d in 0..out_dims[3] {
                    let at = [a, b, c, d];
                    let src: usize = (0..4).map(|k| at[k] * strides[perm[k]]).sum();
                    out.push(w[src]);
                }
            }
        }
    }
    out
}

/// Reorders a conv kernel from Keras' `[kh, kw, in, out]` to Burn's `[out, in, kh, kw]`.
pub fn hwio_to_oihw(w: &[f32], dims: [usize; 4]) -> Vec<f32> {
    permuted4(w, dims, [3, 2, 0, 1])
}

/// Reorders a conv kernel from Burn's `[out, in, kh, kw]` to Keras' `[kh, kw, in, out]`.
pub fn oihw_to_hwio(w: &[f32], dims: [usize; 4]) -> Vec<f32> {
    permuted4(w, dims, [2, 3, 1, 0])
}

/// `f` on the `n` values of a rank-2 tensor, reshaped back.
fn via_flat(t: Tensor<2>, n: usize, f: impl FnOnce(Tensor<1>) -> Tensor<1>) -> Tensor<2> {
    let dims = t.dims();
    f(t.reshape([n])).reshape(dims)
}
