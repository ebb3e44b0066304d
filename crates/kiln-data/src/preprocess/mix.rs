//! Batch-level augmentations of keras.io's examples: [`mix_up`] ("MixUp augmentation for image
//! classification", `examples/vision/mixup.py`) and [`cut_mix`] ("CutMix data augmentation for
//! image classification", `examples/vision/cutmix.py`). Each example of a batch is combined
//! with a partner from the same batch (the examples zip two shuffled copies of the data; a
//! random permutation of a shuffled batch pairs examples the same way), and its one-hot label
//! with the partner's, in the proportion of the mix.

use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::dataset::{Dataset, Parallelism};
use crate::element::{Array, Buffer, Element};
use crate::error::{DataError, Result};

/// Which components a batch-level mix reads, and its Beta distribution's `alpha`.
#[derive(Debug, Clone, PartialEq)]
pub struct MixOptions {
    /// The images (features) component: `[batch, …]`.
    pub x: String,
    /// The one-hot labels component: `[batch, classes]`.
    pub y: String,
    /// `λ ~ Beta(alpha, alpha)`.
    pub alpha: f64,
}

/// A box of an image that [`cut_mix`] takes from the partner image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutBox {
    /// First row.
    pub top: usize,
    /// First column.
    pub left: usize,
    /// Rows (at least 1).
    pub height: usize,
    /// Columns (at least 1).
    pub width: usize,
}

impl CutBox {
    /// keras.io's `get_box(λ)` for an `height × width` image: sides `side · sqrt(1 - λ)`
    /// (truncated), centred on a uniformly drawn pixel, clipped to the image, at least 1.
    pub fn sample(rng: &mut StdRng, lambda: f64, height: usize, width: usize) -> CutBox {
        let ratio = (1.0 - lambda).max(0.0).sqrt();
        let span = |side: usize, centre: usize| {
            let cut = (side as f64 * ratio) as usize;
            let lo = centre.saturating_sub(cut / 2);
            let hi = (centre + cut / 2).min(side);
            (lo, (hi - lo).max(1))
        };
        let (top, height) = span(height, rng.random_range(0..height.max(1)));
        let (left, width) = span(width, rng.random_range(0..width.max(1)));
        CutBox {
            top,
            left,
            height,
            width,
        }
    }
}

/// A `Gamma(shape, 1)` draw (Marsaglia and Tsang; `shape < 1` through `Gamma(shape + 1)`).
fn sample_gamma(rng: &mut StdRng, shape: f64) -> f64 {
    if shape < 1.0 {
        let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
        return sample_gamma(rng, shape + 1.0) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let (x, v) = loop {
            // A standard normal draw (Box-Muller).
            let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
            let u2: f64 = rng.random();
            let x = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            let v = 1.0 + c * x;
            if v > 0.0 {
                break (x, v * v * v);
            }
        };
        let u: f64 = rng.random();
        if u < 1.0 - 0.0331 * x.powi(4) || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
            return d * v;
        }
    }
}

/// A `Beta(a, b)` draw as the examples' `sample_beta_distribution`: `g1 / (g1 + g2)` of two
/// Gamma draws.
pub fn sample_beta(rng: &mut StdRng, a: f64, b: f64) -> f64 {
    let g1 = sample_gamma(rng, a);
    let g2 = sample_gamma(rng, b);
    if g1 + g2 > 0.0 { g1 / (g1 + g2) } else { 0.5 }
}

/// The float32 values of `name` in `batch` with its shape; labels must be one-hot floats.
fn floats(batch: &Element, name: &str, labels: bool) -> Result<(Vec<usize>, Vec<f32>)> {
    let a = batch.require(name)?;
    if labels && (a.shape().len() != 2 || !matches!(a.data(), Buffer::F32(_) | Buffer::F64(_))) {
        return Err(DataError::InvalidArgument(format!(
            "the labels \"{name}\" are {} {:?}; mixing needs one-hot float labels [batch, \
             classes]: add a one_hot op on them",
            a.dtype(),
            a.shape()
        )));
    }
    Ok((a.shape().to_vec(), a.data().try_to_f32()?))
}

/// Rows of `v` (`rows` of them) as slices.
fn row(v: &[f32], rows: usize, i: usize) -> &[f32] {
    let n = v.len() / rows.max(1);
    &v[i * n..(i + 1) * n]
}

/// Blends each row `i` of `v` with row `partner[i]`: `l_i v_i + (1 - l_i) v_partner`.
fn blend(v: &[f32], rows: usize, partner: &[usize], weight: &[f64]) -> Vec<f32> {
    (0..rows)
        .flat_map(|i| {
            let (a, b, l) = (row(v, rows, i), row(v, rows, partner[i]), weight[i] as f32);
            a.iter().zip(b).map(move |(&a, &b)| a * l + b * (1.0 - l))
        })
        .collect()
}

fn put(batch: &mut Element, name: &str, shape: Vec<usize>, v: Vec<f32>) -> Result<()> {
    batch.insert(name, Array::new(shape, Buffer::F32(v))?);
    Ok(())
}

/// The features and labels of `batch` (shape, float values), checked to fit `partner` and
/// `values` per-example mixing values.
fn operands(
    batch: &Element,
    x: &str,
    y: &str,
    partner: &[usize],
    values: usize,
) -> Result<[(Vec<usize>, Vec<f32>); 2]> {
    let (features, labels) = (floats(batch, x, false)?, floats(batch, y, true)?);
    let rows = labels.0[0];
    if partner.len() != rows || values != rows || partner.iter().any(|&p| p >= rows) {
        return Err(DataError::InvalidArgument(format!(
            "a batch of {rows} needs {rows} partners in 0..{rows} and {rows} mixing values"
        )));
    }
    Ok([features, labels])
}

/// keras.io's `mix_up` on a batch: example `i` becomes `λ_i x_i + (1 - λ_i) x_p(i)` and its
/// label `λ_i y_i + (1 - λ_i) y_p(i)` (`p = partner`), both `float32`.
///
/// # Errors
/// [`DataError::InvalidArgument`] for labels that are not one-hot floats `[batch, classes]`,
/// string features, or `partner` / `lambda` not one per example;
/// [`DataError::MissingComponent`] for a missing component.
pub fn mix_up(
    mut batch: Element,
    x: &str,
    y: &str,
    partner: &[usize],
    lambda: &[f64],
) -> Result<Element> {
    let [(xs, xv), (ys, yv)] = operands(&batch, x, y, partner, lambda.len())?;
    let rows = ys[0];
    put(&mut batch, x, xs, blend(&xv, rows, partner, lambda))?;
    put(&mut batch, y, ys, blend(&yv, rows, partner, lambda))?;
    Ok(batch)
}

/// keras.io's `cutmix` on a batch of images `[batch, height, width(, channels)]`: example `i`
/// takes the pixels of `boxes[i]` from image `partner[i]`, and its label becomes
/// `λ y_i + (1 - λ) y_p(i)` with `λ = 1 - box area / image area`; `float32` results.
///
/// # Errors
/// As [`mix_up`], plus images of rank other than 3 or 4 and boxes outside the image.
pub fn cut_mix(
    mut batch: Element,
    x: &str,
    y: &str,
    partner: &[usize],
    boxes: &[CutBox],
) -> Result<Element> {
    let [(xs, xv), (ys, yv)] = operands(&batch, x, y, partner, boxes.len())?;
    let rows = ys[0];
    let (h, w) = image_size(&xs)?;
    let channels: usize = xs[3..].iter().product();
    let mut out = xv.clone();
    let mut lambda = Vec::with_capacity(rows);
    for (i, b) in boxes.iter().enumerate() {
        if b.top + b.height > h || b.left + b.width > w {
            return Err(DataError::InvalidArgument(format!(
                "box {b:?} is outside the {h}x{w} image"
            )));
        }
        let (dst, src) = (i * h * w * channels, partner[i] * h * w * channels);
        for r in b.top..b.top + b.height {
            let at = (r * w + b.left) * channels;
            let n = b.width * channels;
            out[dst + at..dst + at + n].copy_from_slice(&xv[src + at..src + at + n]);
        }
        lambda.push(1.0 - (b.height * b.width) as f64 / (h * w) as f64);
    }
    put(&mut batch, x, xs, out)?;
    put(&mut batch, y, ys, blend(&yv, rows, partner, &lambda))?;
    Ok(batch)
}

/// `(height, width)` of a batch of images `[batch, h, w(, c)]`.
fn image_size(shape: &[usize]) -> Result<(usize, usize)> {
    match shape {
        [_, h, w] | [_, h, w, _] => Ok((*h, *w)),
        other => Err(DataError::InvalidArgument(format!(
            "cut_mix needs images [batch, height, width(, channels)], got {other:?}"
        ))),
    }
}

/// A random pairing of a batch's `rows` examples.
fn partners(rng: &mut StdRng, rows: usize) -> Vec<usize> {
    let mut p: Vec<usize> = (0..rows).collect();
    p.shuffle(rng);
    p
}

/// The batch size of `batch` (the labels' first axis).
fn rows_of(batch: &Element, o: &MixOptions) -> Result<usize> {
    Ok(batch.require(&o.y)?.shape().first().copied().unwrap_or(0))
}

impl Dataset {
    /// [`mix_up`] on every batch, `λ_i ~ Beta(alpha, alpha)` and the pairing drawn from a
    /// generator seeded per batch ([`Dataset::map_with_rng`]): the same seed gives the same
    /// batches, every epoch new ones. Apply after `batch`.
    pub fn mix_up(self, options: MixOptions, seed: u64) -> Dataset {
        let f = move |e: Element, rng: &mut StdRng| {
            let rows = rows_of(&e, &options)?;
            let lambda: Vec<f64> = (0..rows)
                .map(|_| sample_beta(rng, options.alpha, options.alpha))
                .collect();
            let partner = partners(rng, rows);
            mix_up(e, &options.x, &options.y, &partner, &lambda)
        };
        self.map_with_rng(seed, f, Parallelism::Sequential)
    }

    /// [`cut_mix`] on every batch, each example's box drawn as keras.io's `get_box` from
    /// `λ ~ Beta(alpha, alpha)`; seeded as [`Dataset::mix_up`]. Apply after `batch`.
    pub fn cut_mix(self, options: MixOptions, seed: u64) -> Dataset {
        let f = move |e: Element, rng: &mut StdRng| {
            let rows = rows_of(&e, &options)?;
            let (h, w) = image_size(e.require(&options.x)?.shape())?;
            let boxes: Vec<CutBox> = (0..rows)
                .map(|_| {
                    let lambda = sample_beta(rng, options.alpha, options.alpha);
                    CutBox::sample(rng, lambda, h, w)
                })
                .collect();
            let partner = partners(rng, rows);
            cut_mix(e, &options.x, &options.y, &partner, &boxes)
        };
        self.map_with_rng(seed, f, Parallelism::Sequential)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    /// Two 2x2 one-channel images (1..4 and 10..40) with one-hot labels of 3 classes.
    fn batch() -> Element {
        let x = Array::new(
            vec![2, 2, 2, 1],
            Buffer::F32(vec![1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0]),
        )
        .unwrap();
        let y = Array::new(vec![2, 3], Buffer::F32(vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0])).unwrap();
        Element::new().with("x", x).with("y", y)
    }

    fn values(e: &Element, name: &str) -> Vec<f32> {
        e.require(name).unwrap().data().to_f32()
    }

    #[test]
    fn mix_up_blends_images_and_labels_with_the_given_lambda() {
        let out = mix_up(batch(), "x", "y", &[1, 0], &[0.75, 0.5]).unwrap();
        assert_eq!(
            values(&out, "x"),
            [3.25, 6.5, 9.75, 13.0, 5.5, 11.0, 16.5, 22.0]
        );
        assert_eq!(values(&out, "y"), [0.75, 0.0, 0.25, 0.5, 0.0, 0.5]);
        // Paired with itself, an example is unchanged.
        let same = mix_up(batch(), "x", "y", &[0, 1], &[0.3, 0.9]).unwrap();
        assert_eq!(values(&same, "x"), values(&batch(), "x"));
    }

    #[test]
    fn cut_mix_pastes_the_box_and_weights_labels_by_area() {
        let b = CutBox {
            top: 0,
            left: 1,
            height: 2,
            width: 1,
        };
        let out = cut_mix(batch(), "x", "y", &[1, 0], &[b, b]).unwrap();
        assert_eq!(
            values(&out, "x"),
            [1.0, 20.0, 3.0, 40.0, 10.0, 2.0, 30.0, 4.0]
        );
        // λ = 1 - 2/4.
        assert_eq!(values(&out, "y"), [0.5, 0.0, 0.5, 0.5, 0.0, 0.5]);
    }

    #[test]
    fn boxes_follow_keras_io_get_box() {
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..200 {
            let lambda = rng.random::<f64>();
            let b = CutBox::sample(&mut rng, lambda, 32, 32);
            let cut = (32.0 * (1.0 - lambda).sqrt()) as usize;
            assert!(b.height >= 1 && b.top + b.height <= 32, "{b:?}");
            assert!(
                b.width <= cut.max(1) && b.height <= cut.max(1),
                "{b:?} for {cut}"
            );
        }
        // λ = 1: no cut, but keras.io's get_box keeps a box of 1 pixel.
        let b = CutBox::sample(&mut rng, 1.0, 8, 8);
        assert_eq!((b.height, b.width), (1, 1));
    }

    #[test]
    fn beta_draws_have_the_distribution_mean_and_stay_in_0_1() {
        let mut rng = StdRng::seed_from_u64(7);
        for (a, b) in [(0.2, 0.2), (2.0, 5.0), (1.0, 1.0)] {
            let n = 20_000;
            let draws: Vec<f64> = (0..n).map(|_| sample_beta(&mut rng, a, b)).collect();
            assert!(draws.iter().all(|d| (0.0..=1.0).contains(d)));
            let mean = draws.iter().sum::<f64>() / n as f64;
            assert!(
                (mean - a / (a + b)).abs() < 0.01,
                "Beta({a}, {b}) mean {mean}"
            );
        }
    }

    fn mixed(seed: u64, cut: bool) -> Vec<Vec<f32>> {
        let ds = Dataset::from_tensor_slices(
            Element::new()
                .with(
                    "x",
                    Array::new(
                        vec![8, 4, 4],
                        Buffer::F32((0..128).map(|v| v as f32).collect()),
                    )
                    .unwrap(),
                )
                .with(
                    "y",
                    Array::new(
                        vec![8, 2],
                        Buffer::F32((0..16).map(|i| (i % 2) as f32).collect()),
                    )
                    .unwrap(),
                ),
        )
        .unwrap()
        .batch(4, false);
        let o = MixOptions {
            x: "x".into(),
            y: "y".into(),
            alpha: 0.2,
        };
        let ds = if cut {
            ds.cut_mix(o, seed)
        } else {
            ds.mix_up(o, seed)
        };
        ds.iter()
            .flat_map(|b| {
                let b = b.unwrap();
                let y = values(&b, "y");
                for pair in y.chunks(2) {
                    assert!((pair[0] + pair[1] - 1.0).abs() < 1e-6, "{y:?}");
                }
                [values(&b, "x"), y]
            })
            .collect()
    }

    #[test]
    fn seeded_mixes_repeat_and_keep_label_sums() {
        for cut in [false, true] {
            assert_eq!(mixed(5, cut), mixed(5, cut));
            assert_ne!(mixed(5, cut), mixed(6, cut));
        }
    }

    #[test]
    fn integer_labels_are_refused() {
        let e = batch().with("y", Array::new(vec![2], Buffer::I64(vec![0, 2])).unwrap());
        let err = mix_up(e, "x", "y", &[1, 0], &[0.5, 0.5]).unwrap_err();
        assert!(err.to_string().contains("one-hot float labels"), "{err}");
    }
}
