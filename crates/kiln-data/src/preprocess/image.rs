//! Image ops: [`flip`], [`crop`] and [`resize_bilinear`] on `[height, width, channels]` or
//! `[height, width]` arrays (channels-last, as Keras).

use std::fmt;
use std::str::FromStr;

use crate::element::{Array, Buffer};
use crate::error::{DataError, Result};

/// Which axes `keras.layers.RandomFlip(mode)` may flip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlipMode {
    /// `"horizontal"`: left-right (the width axis).
    Horizontal,
    /// `"vertical"`: top-bottom (the height axis).
    Vertical,
    /// `"horizontal_and_vertical"`: each independently (Keras' default).
    #[default]
    HorizontalAndVertical,
}

impl FlipMode {
    /// Keras' name of the mode.
    pub fn name(self) -> &'static str {
        match self {
            FlipMode::Horizontal => "horizontal",
            FlipMode::Vertical => "vertical",
            FlipMode::HorizontalAndVertical => "horizontal_and_vertical",
        }
    }

    /// True when the mode may flip left-right.
    pub fn horizontal(self) -> bool {
        self != FlipMode::Vertical
    }

    /// True when the mode may flip top-bottom.
    pub fn vertical(self) -> bool {
        self != FlipMode::Horizontal
    }
}

impl fmt::Display for FlipMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FlipMode {
    type Err = DataError;

    /// Parses Keras' names: `horizontal`, `vertical`, `horizontal_and_vertical`.
    fn from_str(s: &str) -> Result<FlipMode> {
        match s {
            "horizontal" => Ok(FlipMode::Horizontal),
            "vertical" => Ok(FlipMode::Vertical),
            "horizontal_and_vertical" => Ok(FlipMode::HorizontalAndVertical),
            other => Err(DataError::InvalidArgument(format!(
                "unknown flip mode {other:?}; allowed: \"horizontal\", \"vertical\", \
                 \"horizontal_and_vertical\""
            ))),
        }
    }
}

/// `(height, width, channels)` of an image array: `[h, w, c]`, or `[h, w]` as one channel.
///
/// # Errors
/// [`DataError::InvalidArgument`] for another rank.
pub(crate) fn check_image(x: &Array) -> Result<(usize, usize, usize)> {
    match *x.shape() {
        [h, w] => Ok((h, w, 1)),
        [h, w, c] => Ok((h, w, c)),
        _ => Err(DataError::InvalidArgument(format!(
            "expected an image of shape [height, width, channels] or [height, width], got \
             shape {:?} (apply image ops before batch)",
            x.shape()
        ))),
    }
}

/// A new image of `shape` whose pixel `(y, x)` (all channels) is pixel `index(y, x)` (a
/// row-major pixel index) of `x`. Shared by [`flip`] and [`crop`].
fn gather(x: &Array, shape: Vec<usize>, index: impl Fn(usize, usize) -> usize) -> Result<Array> {
    let (_, _, c) = check_image(x)?;
    let (oh, ow) = (shape[0], shape[1]);
    macro_rules! pick {
        ($v:expr, $wrap:path) => {{
            let mut out = Vec::with_capacity(oh * ow * c);
            for y in 0..oh {
                for xx in 0..ow {
                    let at = index(y, xx) * c;
                    out.extend_from_slice(&$v[at..at + c]);
                }
            }
            $wrap(out)
        }};
    }
    let data = match x.data() {
        Buffer::U8(v) => pick!(v, Buffer::U8),
        Buffer::I32(v) => pick!(v, Buffer::I32),
        Buffer::I64(v) => pick!(v, Buffer::I64),
        Buffer::F32(v) => pick!(v, Buffer::F32),
        Buffer::F64(v) => pick!(v, Buffer::F64),
        Buffer::String(v) => pick!(v, Buffer::String),
    };
    Array::new(shape, data)
}

/// `tf.image.flip_left_right` (`horizontal`) and / or `tf.image.flip_up_down` (`vertical`) of
/// one image; shape and dtype are kept.
///
/// # Errors
/// [`DataError::InvalidArgument`] when `x` is not an image (rank 2 or 3).
pub fn flip(x: &Array, horizontal: bool, vertical: bool) -> Result<Array> {
    let (h, w, _) = check_image(x)?;
    if !horizontal && !vertical {
        return Ok(x.clone());
    }
    gather(x, x.shape().to_vec(), |y, xx| {
        let sy = if vertical { h - 1 - y } else { y };
        let sx = if horizontal { w - 1 - xx } else { xx };
        sy * w + sx
    })
}

/// `tf.image.crop_to_bounding_box(x, top, left, height, width)`: the `height × width` window
/// whose top-left pixel is `(top, left)`; channels and dtype are kept.
///
/// # Errors
/// [`DataError::InvalidArgument`] when `x` is not an image or the window does not fit in it.
pub fn crop(x: &Array, top: usize, left: usize, height: usize, width: usize) -> Result<Array> {
    let (h, w, _) = check_image(x)?;
    if top + height > h || left + width > w {
        return Err(DataError::InvalidArgument(format!(
            "the {height}x{width} window at (top {top}, left {left}) does not fit in a \
             {h}x{w} image"
        )));
    }
    let mut shape = x.shape().to_vec();
    shape[0] = height;
    shape[1] = width;
    gather(x, shape, |y, xx| (top + y) * w + left + xx)
}

/// `(lower, upper, weight of upper)` along one axis for half-pixel-centre bilinear sampling.
fn taps(out: usize, input: usize) -> Vec<(usize, usize, f32)> {
    let scale = input as f64 / out as f64;
    (0..out)
        .map(|o| {
            let x = ((o as f64 + 0.5) * scale - 0.5).max(0.0);
            let lo = (x.floor() as usize).min(input - 1);
            let hi = (lo + 1).min(input - 1);
            (lo, hi, (x - x.floor()) as f32)
        })
        .collect()
}

/// `tf.image.resize(x, (height, width), method="bilinear")` — also Keras'
/// `Resizing(height, width)`: half-pixel centres (an output pixel `o` samples the input at
/// `(o + 0.5) * in / out - 0.5`, clamped to the image), no antialiasing, output `float32` of
/// shape `[height, width, c]` (or `[height, width]` for a rank-2 input). Values are not
/// rounded, as TensorFlow returns them. Resizing `[[0, 1], [2, 3]]` to 4x4 gives rows
/// `[0, 0.25, 0.75, 1]`, `[0.5, 0.75, 1.25, 1.5]`, `[1.5, 1.75, 2.25, 2.5]`, `[2, 2.25, 2.75, 3]`.
///
/// # Errors
/// [`DataError::InvalidArgument`] when `x` is not a numeric image, either size is 0, or the
/// image is empty.
pub fn resize_bilinear(x: &Array, height: usize, width: usize) -> Result<Array> {
    let (h, w, c) = check_image(x)?;
    if height == 0 || width == 0 {
        return Err(DataError::InvalidArgument(format!(
            "the output size {height}x{width} has a zero side"
        )));
    }
    if h == 0 || w == 0 {
        return Err(DataError::InvalidArgument(format!(
            "cannot resize an empty {h}x{w} image"
        )));
    }
    let src = x.data().try_to_f32()?;
    let (ys, xs) = (taps(height, h), taps(width, w));
    let mut out = Vec::with_capacity(height * width * c);
    for &(y0, y1, dy) in &ys {
        for &(x0, x1, dx) in &xs {
            for ch in 0..c {
                let at = |y: usize, xx: usize| src[(y * w + xx) * c + ch];
                let top = at(y0, x0) + (at(y0, x1) - at(y0, x0)) * dx;
                let bottom = at(y1, x0) + (at(y1, x1) - at(y1, x0)) * dx;
                out.push(top + (bottom - top) * dy);
            }
        }
    }
    let mut shape = x.shape().to_vec();
    shape[0] = height;
    shape[1] = width;
    Array::new(shape, Buffer::F32(out))
}
