//! Code the convolution layers share (Conv1D, Conv2D, Conv1DTranspose, Conv2DTranspose,
//! DepthwiseConv2D, SeparableConv2D, and the 1-D pooling layers' windows): window geometry
//! with dilation and TensorFlow's padding rules, the forward passes on Burn tensors and the
//! ONNX nodes. A 1-D layer runs as a 2-D one over an image of height 1.

use burn::prelude::*;
use burn::tensor::module::{conv_transpose2d, conv2d};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::model::args::{Padding, Pair};
use crate::model::weights::hwio_to_oihw;
use crate::onnx::{OnnxGraph, OnnxValue, int, ints};
use crate::ops::Epilogue;

/// A convolution window over `N` spatial axes (two unless said: a 1-D layer's first axis is
/// `1` everywhere; three for the volume layers): its size, step and dilation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Window<const N: usize = 2> {
    pub kernel: [usize; N],
    pub strides: [usize; N],
    pub dilation: [usize; N],
}

/// Per-axis `(begin, end)` zero padding.
pub(super) type Pads<const N: usize = 2> = [(usize, usize); N];

impl Window {
    /// A 2-D window of Keras' `kernel_size`, `strides` and `dilation_rate`.
    pub fn new(kernel: Pair, strides: Pair, dilation: Pair) -> Window {
        Window {
            kernel: kernel.0,
            strides: strides.0,
            dilation: dilation.0,
        }
    }

    /// A 1-D window (`[1, k]` over `[1, steps]`).
    pub fn one_d(kernel: usize, strides: usize, dilation: usize) -> Window {
        Window {
            kernel: [1, kernel],
            strides: [1, strides],
            dilation: [1, dilation],
        }
    }
}

impl<const N: usize> Window<N> {
    /// The extent the dilated window covers, `(k - 1) * d + 1` per axis.
    pub fn span(&self) -> [usize; N] {
        std::array::from_fn(|i| (self.kernel[i] - 1) * self.dilation[i] + 1)
    }

    /// Output size and padding over `input` with Keras' `valid` or `same` padding (TensorFlow's
    /// rules on the dilated window: `same` gives `ceil(in / s)`, the odd value padded at the
    /// end), or why the window does not fit.
    pub fn resolve(
        &self,
        padding: Padding,
        input: [usize; N],
    ) -> Result<([usize; N], Pads<N>), String> {
        let span = self.span();
        let mut out = [0; N];
        let mut pads = [(0, 0); N];
        for i in 0..N {
            let (o, p) = padding
                .resolve(input[i], span[i], self.strides[i])
                .ok_or_else(|| too_large(span[i], self.kernel[i], input[i]))?;
            (out[i], pads[i]) = (o, p);
        }
        Ok((out, pads))
    }

    /// ONNX's spatial attributes of the window with `pads`: `kernel_shape`, `strides`,
    /// `dilations`, `pads` (the last axis only for a 1-D layer).
    pub(super) fn onnx_attrs(
        &self,
        pads: Pads<N>,
        one_d: bool,
    ) -> Vec<crate::onnx::proto::AttributeProto> {
        let axes = |v: [usize; N]| -> Vec<i64> {
            let all = v.map(|x| x as i64);
            all[usize::from(one_d)..].to_vec()
        };
        let mut p = axes(pads.map(|(b, _)| b));
        p.extend(axes(pads.map(|(_, e)| e)));
        vec![
            ints("kernel_shape", &axes(self.kernel)),
            ints("strides", &axes(self.strides)),
            ints("dilations", &axes(self.dilation)),
            ints("pads", &p),
        ]
    }
}

impl Window {
    /// Output size and padding of Conv1D's `causal` padding (`span - 1` zeros before the
    /// steps): `ceil(steps / s)` values, each seeing only earlier steps.
    pub fn causal(&self, input: [usize; 2]) -> ([usize; 2], Pads) {
        let [_, span] = self.span();
        let steps = (input[1] - 1) / self.strides[1] + 1;
        ([input[0], steps], [(0, 0), (span - 1, 0)])
    }

    /// A transposed convolution's output size over `input` (Keras'
    /// `compute_conv_transpose_output_shape`) and how many leading values of the full
    /// transposed output (`(in - 1) * s + span` long) it drops (TensorFlow's `same` padding
    /// of the convolution it transposes).
    pub fn transposed(
        &self,
        padding: Padding,
        output_padding: Option<[usize; 2]>,
        input: [usize; 2],
    ) -> ([usize; 2], [usize; 2]) {
        let span = self.span();
        let mut out = [0; 2];
        let mut begin = [0; 2];
        for i in 0..2 {
            let (n, s, k) = (input[i], self.strides[i], span[i]);
            let full = (n - 1) * s + k;
            let op = output_padding.map(|p| p[i]);
            out[i] = match (padding, op) {
                (Padding::Valid, None) => full + s.max(k) - k,
                (Padding::Valid, Some(p)) => full + p,
                (Padding::Same, None) => n * s,
                (Padding::Same, Some(p)) => (n - 1) * s + k % 2 + p,
            };
            if padding == Padding::Same {
                begin[i] = full.saturating_sub(out[i]) / 2;
            }
        }
        (out, begin)
    }
}

fn too_large(span: usize, k: usize, input: usize) -> String {
    let dilated = if span == k {
        String::new()
    } else {
        format!(" (kernel {k} dilated)")
    };
    format!("window {span}{dilated} is larger than the input ({input}) with padding \"valid\"")
}

/// Checks the arguments every convolution shares: positive sizes, and Keras' rule that
/// `strides` and `dilation_rate` are not both above 1.
pub(super) fn validate_window<const N: usize>(w: &Window<N>, one_d: bool) -> Result<(), String> {
    let show = |v: [usize; N]| match one_d {
        true => v[N - 1].to_string(),
        false => format!("{v:?}"),
    };
    for (name, v) in [
        ("kernel_size", w.kernel),
        ("strides", w.strides),
        ("dilation_rate", w.dilation),
    ] {
        v.iter().try_for_each(|&x| super::positive(name, x))?;
    }
    if w.strides.iter().any(|&s| s > 1) && w.dilation.iter().any(|&d| d > 1) {
        return Err(format!(
            "`strides` {} > 1 cannot be combined with `dilation_rate` {} > 1 (as in Keras); \
             set one of them to 1",
            show(w.strides),
            show(w.dilation)
        ));
    }
    Ok(())
}

/// Checks `groups` against `filters` (both positive, `filters` a multiple of `groups`).
pub(super) fn validate_groups(filters: usize, groups: usize) -> Result<(), String> {
    super::positive("filters", filters)?;
    super::positive("groups", groups)?;
    if !filters.is_multiple_of(groups) {
        return Err(format!(
            "`filters` ({filters}) must be a multiple of `groups` ({groups})"
        ));
    }
    Ok(())
}

/// Checks that an input's `channels` split into `groups`.
pub(super) fn check_channels(class: &str, channels: usize, groups: usize) -> Result<(), String> {
    if !channels.is_multiple_of(groups) {
        return Err(format!(
            "{class} splits its input's {channels} channels into `groups` = {groups}; make \
             the channels a multiple of `groups`"
        ));
    }
    Ok(())
}

/// Checks `output_padding` (each value below its stride, as Keras requires).
pub(super) fn validate_output_padding(
    op: Option<[usize; 2]>,
    strides: [usize; 2],
) -> Result<(), String> {
    let Some(op) = op else { return Ok(()) };
    for (p, s) in op.iter().zip(strides) {
        if *p >= s {
            return Err(format!(
                "`output_padding` {p} must be smaller than its stride {s}"
            ));
        }
    }
    Ok(())
}

/// A sequence `[batch, steps, channels]` as an image `[batch, channels, 1, steps]`.
pub(super) fn seq_as_image(x: Tensor<3>) -> Tensor<4> {
    x.swap_dims(1, 2).unsqueeze_dim(2)
}

/// An image `[batch, channels, 1, steps]` as the sequence `[batch, steps, channels]`.
pub(super) fn image_as_seq(y: Tensor<4>) -> Tensor<3> {
    let [n, c, _, s] = y.dims();
    y.reshape([n, c, s]).swap_dims(1, 2)
}

/// 2-D convolution of NCHW `x` with `kernel` (Burn's `[out, in / groups, kh, kw]`) and
/// `pads`, then the `epilogue` (a ReLU, rounding): kiln's fused convolution without dilation
/// and groups, Burn's otherwise.
pub(super) fn convolve(
    x: Tensor<4>,
    kernel: Tensor<4>,
    bias: Option<Tensor<1>>,
    (w, pads, groups): (&Window, Pads, usize),
    epilogue: Epilogue,
) -> Tensor<4> {
    if w.dilation == [1, 1] && groups == 1 {
        return crate::ops::conv2d(x, kernel, bias, w.strides, pads, epilogue);
    }
    let options = ConvOptions::new_with_padding(w.strides, pads, w.dilation, groups);
    epilogue.apply(conv2d(x, kernel, bias, options))
}

/// Depthwise 2-D convolution of NCHW `x` with Keras' `kernel [kh, kw, in, depth_multiplier]`:
/// output channel `c * depth_multiplier + m` is input channel `c` convolved with `kernel[..,
/// c, m]` (a convolution of `in` groups).
pub(super) fn convolve_depthwise(
    x: Tensor<4>,
    kernel: Tensor<4>,
    w: &Window,
    pads: Pads,
) -> Tensor<4> {
    let [kh, kw, cin, dm] = kernel.dims();
    let kernel = kernel.reshape([kh, kw, 1, cin * dm]).permute([3, 2, 0, 1]);
    convolve(x, kernel, None, (w, pads, cin), Epilogue::default())
}

/// The ONNX `Conv` of a depthwise convolution with Keras' kernel `values` of shape `[kh, kw,
/// in, depth_multiplier]` and `bias`.
pub(super) fn onnx_depthwise(
    values: &[f32],
    [kh, kw, cin, dm]: [usize; 4],
    bias: Option<String>,
    pads: Pads,
) -> OnnxConv<'static> {
    OnnxConv {
        op: "Conv",
        kernel: OnnxKernel::from_keras(values, [kh, kw, 1, cin * dm]),
        bias,
        group: cin,
        pads,
        output_padding: None,
    }
}

/// Transposed 2-D convolution of NCHW `x` with `kernel` (Burn's `[in, out, kh, kw]`): the full
/// output, its first `begin` rows/columns dropped and zeros appended where `out` reaches past
/// it (Keras' `output_padding`), then the bias.
pub(super) fn convolve_transposed(
    x: Tensor<4>,
    kernel: Tensor<4>,
    bias: Option<Tensor<1>>,
    w: &Window,
    (out, begin): ([usize; 2], [usize; 2]),
) -> Tensor<4> {
    let options = ConvTransposeOptions::new(w.strides, [0, 0], [0, 0], w.dilation, 1);
    let mut y = conv_transpose2d(x, kernel, None, options);
    for axis in 0..2 {
        let dims = y.dims();
        let full = dims[axis + 2];
        let end = begin[axis] + out[axis];
        if end > full {
            let mut shape = dims;
            shape[axis + 2] = end - full;
            let zeros = Tensor::zeros(shape, &y.device());
            y = Tensor::cat(vec![y, zeros], axis + 2);
        }
        y = y.narrow(axis + 2, begin[axis], out[axis]);
    }
    plus_bias(y, bias)
}

/// NCHW `y` plus a bias per channel.
pub(super) fn plus_bias(y: Tensor<4>, bias: Option<Tensor<1>>) -> Tensor<4> {
    match bias {
        Some(b) => {
            let c = b.dims()[0];
            y + b.reshape([1, c, 1, 1])
        }
        None => y,
    }
}

/// The ONNX pads and `output_padding` of a transposed convolution whose full output
/// (`full`) loses `begin` leading values and is `out` long.
fn transposed_pads(full: [usize; 2], (out, begin): ([usize; 2], [usize; 2])) -> (Pads, [usize; 2]) {
    let mut pads = [(0, 0); 2];
    let mut extra = [0; 2];
    for i in 0..2 {
        let end = begin[i] + out[i];
        pads[i] = (begin[i], full[i].saturating_sub(end));
        extra[i] = end.saturating_sub(full[i]);
    }
    (pads, extra)
}

/// A kernel for ONNX: its values (already in ONNX's `[out, in, kh, kw]` or, transposed,
/// `[in, out, kh, kw]` order) and those dims.
pub(super) struct OnnxKernel {
    pub values: Vec<f32>,
    pub dims: [usize; 4],
}

impl OnnxKernel {
    /// A Keras kernel `[kh, kw, a, b]` (`a`, `b`: input and output channels of a convolution,
    /// or output and input channels of a transposed one) as ONNX's `[b, a, kh, kw]`.
    pub fn from_keras(values: &[f32], [kh, kw, a, b]: [usize; 4]) -> OnnxKernel {
        OnnxKernel {
            values: hwio_to_oihw(values, [kh, kw, a, b]),
            dims: [b, a, kh, kw],
        }
    }
}

/// How an ONNX convolution node is set up besides its window.
pub(super) struct OnnxConv<'a> {
    /// `Conv` or `ConvTranspose`.
    pub op: &'a str,
    pub kernel: OnnxKernel,
    /// The bias initializer's name.
    pub bias: Option<String>,
    pub group: usize,
    pub pads: Pads,
    /// A transposed convolution's full output size and `output_padding`.
    pub output_padding: Option<[usize; 2]>,
}

/// A convolution node named `name/<suffix>` on `x` (an NCHW image, or a `[batch, steps,
/// channels]` sequence taken channels-first around it); returns its output in `x`'s layout.
pub(super) fn onnx_conv(
    g: &mut OnnxGraph,
    name: &str,
    x: &OnnxValue,
    w: &Window,
    conv: OnnxConv,
    suffix: &str,
) -> String {
    let one_d = x.shape.len() == 2;
    let [o, i, kh, kw] = conv.kernel.dims;
    let dims: Vec<usize> = if one_d {
        vec![o, i, kw]
    } else {
        vec![o, i, kh, kw]
    };
    let kernel = g.named_constant(&format!("{name}/{suffix}"), &dims, &conv.kernel.values);
    let mut args = vec![kernel];
    args.extend(conv.bias);
    let input = if one_d {
        g.transpose(name, &x.name, &[0, 2, 1])
    } else {
        x.name.clone()
    };
    args.insert(0, input);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut attrs = w.onnx_attrs(conv.pads, one_d);
    attrs.push(int("group", conv.group as i64));
    if let Some(op) = conv.output_padding {
        let op: Vec<i64> = op
            .iter()
            .skip(usize::from(one_d))
            .map(|&v| v as i64)
            .collect();
        attrs.push(ints("output_padding", &op));
    }
    let y = g.node(name, conv.op, &refs, attrs);
    if one_d {
        g.transpose(name, &y, &[0, 2, 1])
    } else {
        y
    }
}

/// The initializer of the layer's `bias [n]` when it has one.
pub(super) fn onnx_bias(
    g: &mut OnnxGraph,
    name: &str,
    use_bias: bool,
    n: usize,
) -> Result<Option<String>, String> {
    if !use_bias {
        return Ok(None);
    }
    g.weight(&format!("{name}/bias"), &[n], &[n]).map(Some)
}

/// The ONNX setup of a transposed convolution over `input` (spatial `[h, w]`).
pub(super) fn onnx_transposed(
    w: &Window,
    input: [usize; 2],
    geometry: ([usize; 2], [usize; 2]),
    kernel: OnnxKernel,
    bias: Option<String>,
) -> OnnxConv<'static> {
    let span = w.span();
    let full = [0, 1].map(|i| (input[i] - 1) * w.strides[i] + span[i]);
    let (pads, extra) = transposed_pads(full, geometry);
    OnnxConv {
        op: "ConvTranspose",
        kernel,
        bias,
        group: 1,
        pads,
        output_padding: Some(extra),
    }
}

/// serde default: 1.
pub(super) fn one() -> usize {
    1
}

/// serde: whether a value is 1 (a default left out of the written config).
pub(super) fn is_one(v: &usize) -> bool {
    *v == 1
}

/// serde: whether a pair is `[1, 1]`.
pub(super) fn is_one_pair(v: &Pair) -> bool {
    v.0 == [1, 1]
}

/// The spatial size arguments of a layer of one or two spatial axes (`kernel_size`,
/// `strides`, ...): an integer for a 1-D layer, an integer or `[h, w]` ([`Pair`]) for a 2-D one.
pub trait SpatialSize:
    Copy + std::fmt::Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// One spatial axis (steps) rather than two.
    const ONE_D: bool;
    /// The size over `[h, w]` (`[1, v]` for a 1-D layer).
    fn pair(self) -> [usize; 2];
    /// 1 on every axis (Keras' default stride and dilation).
    fn one() -> Self;
}

impl SpatialSize for usize {
    const ONE_D: bool = true;
    fn pair(self) -> [usize; 2] {
        [1, self]
    }
    fn one() -> Self {
        1
    }
}

impl SpatialSize for Pair {
    const ONE_D: bool = false;
    fn pair(self) -> [usize; 2] {
        self.0
    }
    fn one() -> Self {
        Pair([1, 1])
    }
}
