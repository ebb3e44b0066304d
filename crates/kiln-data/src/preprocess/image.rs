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

/// [`flip`] of an owned image, in place: no new buffer.
pub(crate) fn flip_owned(mut x: Array, horizontal: bool, vertical: bool) -> Result<Array> {
    let (h, w, c) = check_image(&x)?;
    macro_rules! swap {
        ($v:expr) => {{
            let v = $v;
            let row = w * c;
            if vertical {
                for y in 0..h / 2 {
                    let (upper, lower) = v.split_at_mut((h - 1 - y) * row);
                    upper[y * row..(y + 1) * row].swap_with_slice(&mut lower[..row]);
                }
            }
            if horizontal {
                for r in v.chunks_exact_mut(row) {
                    for xx in 0..w / 2 {
                        let (left, right) = r.split_at_mut((w - 1 - xx) * c);
                        left[xx * c..(xx + 1) * c].swap_with_slice(&mut right[..c]);
                    }
                }
            }
        }};
    }
    match x.data_mut() {
        Buffer::U8(v) => swap!(v),
        Buffer::I32(v) => swap!(v),
        Buffer::I64(v) => swap!(v),
        Buffer::F32(v) => swap!(v),
        Buffer::F64(v) => swap!(v),
        Buffer::String(v) => swap!(v),
    }
    Ok(x)
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
/// Computed separably, as TensorFlow's kernel (`tensorflow/core/kernels/image/
/// resize_bilinear_op.cc`): each input row that an output row needs is interpolated along
/// the width once (`top = a + (b - a) · dx`), then output rows blend two such rows
/// (`top + (bottom - top) · dy`) — the same arithmetic, value for value, as interpolating
/// each output pixel from its four neighbours, without converting the image to `float32`
/// first.
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
    let what = format!("resize to {height}x{width}x{c} float32");
    crate::alloc::check(&what, crate::alloc::product(&what, &[height, width, c])?, 4)?;
    let size = Size {
        h,
        w,
        c,
        height,
        width,
    };
    let out = match x.data() {
        Buffer::U8(v) => resize_rows(v, size, f32::from),
        Buffer::F32(v) => resize_rows(v, size, |a| a),
        Buffer::I32(v) => resize_rows(v, size, |a| a as f32),
        Buffer::I64(v) => resize_rows(v, size, |a| a as f32),
        Buffer::F64(v) => resize_rows(v, size, |a| a as f32),
        Buffer::String(_) => {
            return Err(DataError::InvalidArgument(
                "cannot convert string values to float32 (resize needs numbers)".into(),
            ));
        }
    };
    let mut shape = x.shape().to_vec();
    shape[0] = height;
    shape[1] = width;
    Array::new(shape, Buffer::F32(out))
}

/// Input `h × w × c` and output `height × width` of [`resize_bilinear`].
#[derive(Clone, Copy)]
struct Size {
    h: usize,
    w: usize,
    c: usize,
    height: usize,
    width: usize,
}

/// [`resize_bilinear`]'s loops over `src` (`h × w × c` values, converted by `to_f32`).
fn resize_rows<T: Copy>(src: &[T], size: Size, to_f32: impl Fn(T) -> f32) -> Vec<f32> {
    let Size {
        h,
        w,
        c,
        height,
        width,
    } = size;
    let ys = taps(height, h);
    // Per output column: the offsets of its two input pixels in a row, and the weight.
    let xs: Vec<(usize, usize, f32)> = taps(width, w)
        .into_iter()
        .map(|(x0, x1, dx)| (x0 * c, x1 * c, dx))
        .collect();
    let row_len = width * c;
    // Input row `y` interpolated along the width into `dst` (`row_len` values).
    let interpolate = |y: usize, dst: &mut [f32]| {
        let row = &src[y * w * c..(y + 1) * w * c];
        for (o, &(x0, x1, dx)) in dst.chunks_exact_mut(c).zip(&xs) {
            for ch in 0..c {
                let a = to_f32(row[x0 + ch]);
                let b = to_f32(row[x1 + ch]);
                o[ch] = a + (b - a) * dx;
            }
        }
    };
    // The two most recent interpolated rows, with their input row numbers: consecutive
    // output rows mostly reuse them.
    let mut rows = [
        (usize::MAX, vec![0f32; row_len]),
        (usize::MAX, vec![0f32; row_len]),
    ];
    let mut out = vec![0f32; height * row_len];
    for (dst, &(y0, y1, dy)) in out.chunks_exact_mut(row_len).zip(&ys) {
        let find = |rows: &[(usize, Vec<f32>); 2], y: usize| rows.iter().position(|r| r.0 == y);
        // Row y0 goes where it does not evict row y1; row y1 where it does not evict y0.
        let i0 = find(&rows, y0).unwrap_or_else(|| {
            let slot = usize::from(rows[0].0 == y1);
            interpolate(y0, &mut rows[slot].1);
            rows[slot].0 = y0;
            slot
        });
        let i1 = find(&rows, y1).unwrap_or_else(|| {
            let slot = 1 - i0;
            interpolate(y1, &mut rows[slot].1);
            rows[slot].0 = y1;
            slot
        });
        let (top, bottom) = (&rows[i0].1, &rows[i1].1);
        for ((o, &t), &b) in dst.iter_mut().zip(top).zip(bottom) {
            *o = t + (b - t) * dy;
        }
    }
    out
}
