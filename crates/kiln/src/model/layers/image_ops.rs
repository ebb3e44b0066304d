//! Code the image preprocessing layers share (Resizing, CenterCrop, RandomCrop, RandomFlip,
//! RandomRotation, RandomZoom, RandomTranslation, RandomContrast, RandomBrightness; not layers):
//! Keras' factor arguments, the per-example draws, and [`Sampling`], the resampling of an
//! image batch that resizes and affine transforms share (TensorFlow's `resize` with half-pixel
//! centers and `ImageProjectiveTransformV3` with its fill modes, computed on the host as source
//! pixels and weights per output pixel, then gathered on the device, so the gradient reaches
//! the input).

use burn::prelude::*;
use burn::tensor::Distribution;
use serde::{Deserialize, Serialize};

use crate::model::act::Act;
use crate::model::layer::ForwardContext;

/// A range `(lower, upper)` that a draw comes from.
pub(super) type Range = (f64, f64);

/// A Keras factor: a number `f` (the range `[-f, f]`, clipped to the layer's bounds) or a
/// pair `[lower, upper]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Factor {
    /// `f`: `[-|f|, |f|]`.
    One(f64),
    /// `[lower, upper]` (either order).
    Pair([f64; 2]),
}

impl Factor {
    /// `(lower, upper)` as Keras' base preprocessing layer sets it (`_set_factor` with
    /// `_FACTOR_BOUNDS = (lo, hi)`): a number must lie in the bounds and gives
    /// `[max(-|f|, lo), |f|]`; a pair is sorted and must overlap the bounds.
    pub fn bounded(self, name: &str, (lo, hi): (f64, f64)) -> Result<(f64, f64), String> {
        let bad = || {
            format!(
                "`{name}` must be a number (or a list of two numbers) in [{lo}, {hi}], got {}",
                self.show()
            )
        };
        match self {
            Factor::One(f) if (lo..=hi).contains(&f) => Ok(((-f.abs()).max(lo), f.abs())),
            Factor::Pair([a, b]) if a <= hi && b >= lo && a.is_finite() && b.is_finite() => {
                Ok((a.min(b), a.max(b)))
            }
            _ => Err(bad()),
        }
    }

    /// `(lower, upper)` as RandomZoom and RandomTranslation set it: every value in `range`
    /// (`(-1, 1]` or `[-1, 1]`, `open_low` says which), a number `f` gives `[-|f|, |f|]`.
    pub fn symmetric(self, name: &str, open_low: bool) -> Result<(f64, f64), String> {
        let ok = |v: f64| v <= 1.0 && (v > -1.0 || (!open_low && v == -1.0));
        let (a, b) = match self {
            Factor::One(f) => (-f.abs(), f.abs()),
            Factor::Pair([a, b]) => (a.min(b), a.max(b)),
        };
        let values = match self {
            Factor::One(f) => vec![f],
            Factor::Pair(p) => p.to_vec(),
        };
        match values.into_iter().all(ok) {
            true => Ok((a, b)),
            false => Err(format!(
                "`{name}` values must be in {}-1, 1], got {}",
                if open_low { "(" } else { "[" },
                self.show()
            )),
        }
    }

    fn show(self) -> String {
        match self {
            Factor::One(f) => f.to_string(),
            Factor::Pair([a, b]) => format!("[{a}, {b}]"),
        }
    }
}

/// Keras' `interpolation` of the resampling layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Interpolation {
    /// Weighs the 2x2 nearest pixels.
    #[default]
    Bilinear,
    /// Takes the nearest pixel.
    Nearest,
}

/// Keras' `fill_mode`: what an affine transform reads outside the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FillMode {
    /// `dcba|abcd|dcba` (the edge pixel repeated once).
    #[default]
    Reflect,
    /// `abcd|abcd|abcd`.
    Wrap,
    /// `fill_value` outside.
    Constant,
    /// The nearest edge pixel.
    Nearest,
}

impl FillMode {
    /// The input coordinate an output coordinate `c` reads along an axis of `len` pixels
    /// (TensorFlow's `MapCoordinate`; `Constant` leaves it outside).
    fn map(self, c: f32, len: usize) -> f32 {
        let n = len as f32;
        let last = n - 1.0;
        let mapped = match self {
            FillMode::Constant => return c,
            FillMode::Nearest => c,
            _ if len <= 1 => 0.0,
            FillMode::Reflect if c < 0.0 => {
                let sz2 = 2.0 * n;
                let c = sz2 * ((-c / sz2) as i64) as f32 + c;
                if c < -n { c + sz2 } else { -c - 1.0 }
            }
            FillMode::Reflect if c > last => {
                let sz2 = 2.0 * n;
                let c = c - sz2 * ((c / sz2) as i64) as f32;
                if c >= n { sz2 - c - 1.0 } else { c }
            }
            FillMode::Wrap if c < 0.0 => c + n * (((-c / last) as i64) as f32 + 1.0),
            FillMode::Wrap if c > last => c - n * ((c / last) as i64) as f32,
            _ => c,
        };
        mapped.clamp(0.0, last)
    }
}

/// Where each output pixel of a batch of images reads: `taps` source pixels each (an index
/// into the batch's pixels, `[batch * height * width]` row-major, and a weight) plus a
/// constant (the fill value times the weight of the taps that fall outside the image).
pub(super) struct Sampling {
    /// Output `[batch, height, width]`.
    out: [usize; 3],
    /// `taps` × output pixels: source pixel (tap-major).
    index: Vec<i64>,
    /// The weights of `index`.
    weight: Vec<f32>,
    /// Per output pixel; `None` when no tap falls outside.
    fill: Option<Vec<f32>>,
}

impl Sampling {
    fn new(out: [usize; 3], taps: usize) -> Sampling {
        let n = out.iter().product::<usize>() * taps;
        Sampling {
            out,
            index: Vec::with_capacity(n),
            weight: Vec::with_capacity(n),
            fill: None,
        }
    }

    fn pixels(&self) -> usize {
        self.out.iter().product()
    }

    /// `x` (`[batch, channels, height, width]`) resampled.
    pub(super) fn apply(&self, x: Tensor<4>) -> Tensor<4> {
        let [b, c, h, w] = x.dims();
        let [ob, oh, ow] = self.out;
        debug_assert_eq!(b, ob);
        let device = x.device();
        let rows = x.permute([0, 2, 3, 1]).reshape([b * h * w, c]);
        let n = self.pixels();
        let mut y: Option<Tensor<2>> = None;
        for (index, weight) in self.index.chunks(n).zip(self.weight.chunks(n)) {
            let at = Tensor::<1, Int>::from_data(TensorData::new(index.to_vec(), [n]), &device);
            let wt = Tensor::<2>::from_data(TensorData::new(weight.to_vec(), [n, 1]), &device);
            let tap = rows.clone().select(0, at) * wt;
            y = Some(match y {
                Some(y) => y + tap,
                None => tap,
            });
        }
        let mut y = y.expect("at least one tap");
        if let Some(fill) = &self.fill {
            y = y + Tensor::<2>::from_data(TensorData::new(fill.clone(), [n, 1]), &device);
        }
        y.reshape([b, oh, ow, c]).permute([0, 3, 1, 2])
    }
}

/// A crop box `[top, left, height, width]` inside an image.
pub(super) type CropBox = [usize; 4];

/// TensorFlow's `resize` (half-pixel centers, no antialiasing) of the `box` of every image of
/// a batch of `batch` images `[height, width]` to `[out_h, out_w]`.
pub(super) fn resize(
    batch: usize,
    [h, w]: [usize; 2],
    [top, left, bh, bw]: CropBox,
    [out_h, out_w]: [usize; 2],
    interpolation: Interpolation,
) -> Sampling {
    let rows = axis_taps(bh, out_h, interpolation);
    let cols = axis_taps(bw, out_w, interpolation);
    let taps = rows[0].len();
    let mut s = Sampling::new([batch, out_h, out_w], taps * taps);
    for (ty, tx) in (0..taps).flat_map(|a| (0..taps).map(move |b| (a, b))) {
        for e in 0..batch {
            for r in &rows {
                for c in &cols {
                    let (sy, wy) = r[ty];
                    let (sx, wx) = c[tx];
                    s.index
                        .push((e * h * w + (top + sy) * w + left + sx) as i64);
                    s.weight.push(wy * wx);
                }
            }
        }
    }
    s
}

/// Per output position along one axis, the source positions and weights of TensorFlow's
/// half-pixel resize from `len` to `out`.
fn axis_taps(len: usize, out: usize, interpolation: Interpolation) -> Vec<Vec<(usize, f32)>> {
    let scale = len as f32 / out as f32;
    let last = len - 1;
    (0..out)
        .map(|o| match interpolation {
            Interpolation::Nearest => {
                let at = (((o as f32 + 0.5) * scale).floor().max(0.0) as usize).min(last);
                vec![(at, 1.0)]
            }
            Interpolation::Bilinear => {
                let at = (o as f32 + 0.5) * scale - 0.5;
                let floor = at.floor();
                let lerp = at - floor;
                let lower = (floor.max(0.0) as usize).min(last);
                let upper = (at.ceil().max(0.0) as usize).min(last);
                vec![(lower, 1.0 - lerp), (upper, lerp)]
            }
        })
        .collect()
}

/// Keras' `crop_to_aspect_ratio` box: the largest centered box of `[h, w]` with the target's
/// aspect ratio (`backend.image.resize`).
pub(super) fn aspect_crop([h, w]: [usize; 2], [th, tw]: [usize; 2]) -> CropBox {
    let ch = ((w * th) as f32 / tw as f32) as usize;
    let ch = ch.min(h).max(1);
    let cw = ((h * tw) as f32 / th as f32) as usize;
    let cw = cw.min(w).max(1);
    [
        ((h - ch) as f32 / 2.0) as usize,
        ((w - cw) as f32 / 2.0) as usize,
        ch,
        cw,
    ]
}

/// An affine transform per example, Keras' `[a0, a1, a2, b0, b1, b2]`: the output pixel at
/// column `x`, row `y` reads the input at `(a0 x + a1 y + a2, b0 x + b1 y + b2)`.
pub(super) type Affine = [f32; 6];

/// How an affine transform reads outside the image and between pixels.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fill {
    pub(super) mode: FillMode,
    pub(super) value: f32,
    pub(super) interpolation: Interpolation,
}

/// Keras' `affine_transform` (TensorFlow's `ImageProjectiveTransformV3`) of a batch of
/// `[h, w]` images, one transform per example.
pub(super) fn affine(transforms: &[Affine], [h, w]: [usize; 2], fill: Fill) -> Sampling {
    let taps = match fill.interpolation {
        Interpolation::Nearest => 1,
        Interpolation::Bilinear => 4,
    };
    let per_tap = transforms.len() * h * w;
    let mut s = Sampling::new([transforms.len(), h, w], taps);
    s.index = vec![0; per_tap * taps];
    s.weight = vec![0.0; per_tap * taps];
    let mut outside = vec![0.0f32; per_tap];
    for (e, t) in transforms.iter().enumerate() {
        for (y, x) in (0..h).flat_map(|y| (0..w).map(move |x| (y, x))) {
            let (xf, yf) = (x as f32, y as f32);
            let sx = fill.mode.map(t[0] * xf + t[1] * yf + t[2], w);
            let sy = fill.mode.map(t[3] * xf + t[4] * yf + t[5], h);
            let p = (e * h + y) * w + x;
            for (k, (ry, rx, wt)) in reads(sy, sx, fill.interpolation).into_iter().enumerate() {
                let at = k * per_tap + p;
                if (0..h as i64).contains(&ry) && (0..w as i64).contains(&rx) {
                    s.index[at] = ((e * h) as i64 + ry) * w as i64 + rx;
                    s.weight[at] = wt;
                } else {
                    outside[p] += wt;
                }
            }
        }
    }
    if fill.value != 0.0 && outside.iter().any(|&v| v != 0.0) {
        s.fill = Some(outside.into_iter().map(|v| v * fill.value).collect());
    }
    s
}

/// The pixels `(row, column, weight)` an interpolation reads at `(y, x)` (TensorFlow's
/// `nearest_interpolation`, rounding half away from zero, and `bilinear_interpolation`).
fn reads(y: f32, x: f32, interpolation: Interpolation) -> Vec<(i64, i64, f32)> {
    match interpolation {
        Interpolation::Nearest => vec![(y.round() as i64, x.round() as i64, 1.0)],
        Interpolation::Bilinear => {
            let (y0, x0) = (y.floor(), x.floor());
            let (y1, x1) = (y0 + 1.0, x0 + 1.0);
            let (ry0, rx0) = (y0 as i64, x0 as i64);
            vec![
                (ry0, rx0, (y1 - y) * (x1 - x)),
                (ry0, rx0 + 1, (y1 - y) * (x - x0)),
                (ry0 + 1, rx0, (y - y0) * (x1 - x)),
                (ry0 + 1, rx0 + 1, (y - y0) * (x - x0)),
            ]
        }
    }
}

/// `n` draws from `uniform(lower, upper)` of the device's generator (seeded by the run's seed
/// per step, as Dropout's), on the host.
pub(super) fn uniform(device: &Device, n: usize, (lower, upper): (f64, f64)) -> Vec<f32> {
    if lower == upper {
        return vec![lower as f32; n];
    }
    let t = Tensor::<1>::random([n], Distribution::Uniform(lower, upper), device);
    t.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("float draws")
}

/// The image of `x` transformed by `f` while training; `x` itself otherwise (the random
/// layers are the identity at inference).
pub(super) fn in_training(
    x: Act,
    ctx: ForwardContext,
    f: impl FnOnce(Tensor<4>) -> Tensor<4>,
) -> Act {
    match ctx.training {
        true => Act::Image(f(x.into_image())),
        false => x,
    }
}

/// `[height, width]` of an NCHW batch.
pub(super) fn spatial(t: &Tensor<4>) -> [usize; 2] {
    let [_, _, h, w] = t.dims();
    [h, w]
}

/// Keras' `value_range` check: two numbers, low below high.
pub(super) fn value_range(range: [f64; 2]) -> Result<(), String> {
    match range[0] < range[1] {
        true => Ok(()),
        false => Err(format!(
            "`value_range` must be [low, high] with low < high, got {range:?}"
        )),
    }
}

/// The random layers' ONNX form: the identity (an export is for inference, where they do
/// nothing).
macro_rules! identity_at_inference {
    () => {
        fn onnx(
            &self,
            _: &mut $crate::onnx::OnnxGraph,
            inputs: &[$crate::onnx::OnnxValue],
            _: &str,
        ) -> Result<String, String> {
            Ok(inputs[0].name.clone())
        }
        fn saves_input(&self) -> bool {
            false
        }
    };
}
pub(super) use identity_at_inference;

/// A `string` ONNX attribute.
fn string_attr(name: &str, value: &str) -> crate::onnx::proto::AttributeProto {
    crate::onnx::proto::AttributeProto {
        name: Some(name.into()),
        r#type: Some(crate::onnx::proto::attribute_type::STRING),
        s: Some(value.as_bytes().to_vec()),
        ..Default::default()
    }
}

/// ONNX `Resize` of the NCHW value `x` to `[out_h, out_w]` as TensorFlow's half-pixel resize
/// computes it (`half_pixel`: linear, or nearest rounding halves up); the sizes take the batch
/// and channels from `Shape(x)`.
pub(super) fn onnx_resize(
    g: &mut crate::onnx::OnnxGraph,
    name: &str,
    x: &str,
    [out_h, out_w]: [usize; 2],
    interpolation: Interpolation,
) -> String {
    let shape = g.node(name, "Shape", &[x], vec![]);
    let nc = g.slice(name, &shape, 0, 0, 2);
    let hw = g.int64s(name, &[out_h as i64, out_w as i64]);
    let sizes = g.node(
        name,
        "Concat",
        &[&nc, &hw],
        vec![crate::onnx::int("axis", 0)],
    );
    let mut attrs = vec![string_attr("coordinate_transformation_mode", "half_pixel")];
    match interpolation {
        Interpolation::Bilinear => attrs.push(string_attr("mode", "linear")),
        // round_prefer_ceil(x - 0.5) = floor(x): TensorFlow's floor((o + 0.5) * scale).
        Interpolation::Nearest => attrs.extend([
            string_attr("mode", "nearest"),
            string_attr("nearest_mode", "round_prefer_ceil"),
        ]),
    }
    g.node(name, "Resize", &[x, "", "", &sizes], attrs)
}

/// The box `b` of the NCHW batch `t`, resized to `out` with `resized` (as it is without).
pub(super) fn crop_resize(
    t: Tensor<4>,
    b: CropBox,
    resized: Option<Interpolation>,
    out: [usize; 2],
) -> Tensor<4> {
    let [top, left, bh, bw] = b;
    match resized {
        None => t.narrow(2, top, bh).narrow(3, left, bw),
        Some(i) => resize(t.dims()[0], spatial(&t), b, out, i).apply(t),
    }
}

/// [`crop_resize`] in an ONNX graph: `Slice`s (where the box is not the whole image), then
/// `Resize`.
pub(super) fn onnx_crop_resize(
    g: &mut crate::onnx::OnnxGraph,
    name: &str,
    x: &crate::onnx::OnnxValue,
    [top, left, bh, bw]: CropBox,
    resized: Option<Interpolation>,
    out: [usize; 2],
) -> String {
    let mut y = x.name.clone();
    if [top, bh] != [0, x.shape[0]] {
        y = g.slice(name, &y, 2, top, top + bh);
    }
    if [left, bw] != [0, x.shape[1]] {
        y = g.slice(name, &y, 3, left, left + bw);
    }
    match resized {
        None => y,
        Some(i) => onnx_resize(g, name, &y, out, i),
    }
}

/// The resampling layers' compute figure: per output value, two operations per tap.
pub(super) fn resample_flops(interpolation: Interpolation, output: &[usize]) -> f64 {
    let taps = match interpolation {
        Interpolation::Bilinear => 4.0,
        Interpolation::Nearest => 1.0,
    };
    2.0 * taps * output.iter().map(|&d| d as f64).product::<f64>()
}

/// `x` with one affine transform per example (from `transforms(device, batch, [h, w])`)
/// applied while training; `x` itself otherwise.
pub(super) fn affine_in_training(
    x: Act,
    ctx: ForwardContext,
    fill: Fill,
    transforms: impl FnOnce(&Device, usize, [usize; 2]) -> Vec<Affine>,
) -> Act {
    in_training(x, ctx, |t| {
        let hw = spatial(&t);
        let each = transforms(&t.device(), t.dims()[0], hw);
        affine(&each, hw, fill).apply(t)
    })
}

/// The [`crate::model::layer::Layer`] methods the affine random layers (RandomRotation,
/// RandomZoom, RandomTranslation) share: the image shape kept, the identity at inference
/// and in ONNX, the resampling's compute figure; fields `fill_mode`, `fill_value`,
/// `interpolation` give [`Fill`] through `fill()`.
macro_rules! affine_layer {
    () => {
        fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
            super::image_shape(inputs[0], <Self as LayerConfig>::CLASS_NAME)?;
            Ok(inputs[0].to_vec())
        }
        fn flops(&self, _: &[&[usize]], output: &[usize], _: usize) -> f64 {
            super::image_ops::resample_flops(self.interpolation, output)
        }
        super::image_ops::identity_at_inference!();
    };
}
pub(super) use affine_layer;

/// The fill arguments of an affine random layer as a [`Fill`].
macro_rules! fill_of {
    ($layer:expr) => {
        super::image_ops::Fill {
            mode: $layer.fill_mode,
            value: $layer.fill_value as f32,
            interpolation: $layer.interpolation,
        }
    };
}
pub(super) use fill_of;

/// One value per example of the NCHW batch `like`, as a `[batch, 1, 1, 1]` tensor.
pub(super) fn per_example(like: &Tensor<4>, values: Vec<f32>) -> Tensor<4> {
    let b = values.len();
    Tensor::from_data(TensorData::new(values, [b, 1, 1, 1]), &like.device())
}

/// The [`crate::model::layer::Layer`] methods of a layer with `height` and `width` fields
/// whose output is `(height, width, channels)` (Resizing, CenterCrop, RandomCrop).
macro_rules! sized_output {
    () => {
        fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
            let class = <Self as LayerConfig>::CLASS_NAME;
            let [_, _, c] = super::image_shape(inputs[0], class)?;
            Ok(vec![self.height, self.width, c])
        }
        fn validate(&self) -> Result<(), String> {
            super::positive("height", self.height)?;
            super::positive("width", self.width)
        }
    };
}
pub(super) use sized_output;

/// The [`crate::model::layer::Layer`] methods of RandomContrast and RandomBrightness: the
/// image shape kept, `value_range` and the factor's `range()` checked, `adjust` applied while
/// training, the identity at inference.
macro_rules! pixel_adjustment {
    () => {
        fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
            super::image_shape(inputs[0], <Self as LayerConfig>::CLASS_NAME)?;
            Ok(inputs[0].to_vec())
        }
        fn validate(&self) -> Result<(), String> {
            super::image_ops::value_range(self.value_range)?;
            self.range().map(|_| ())
        }
        fn forward(&self, mut inputs: Vec<Act>, _: &Weights, ctx: ForwardContext) -> Act {
            super::image_ops::in_training(inputs.remove(0), ctx, |t| self.adjust(t))
        }
        super::image_ops::identity_at_inference!();
    };
}
pub(super) use pixel_adjustment;
