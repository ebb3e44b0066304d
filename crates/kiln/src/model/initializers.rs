//! Weight initializers with Keras' names, arguments, defaults and formulas
//! (`keras/src/initializers/random_initializers.py` and `constant_initializers.py`).
//!
//! TOML takes Keras' identifiers: a name, snake_case or Keras' class name
//! (`kernel_initializer = "he_normal"`, `"HeNormal"`), or a table with `class_name` and the
//! class' arguments, flat or under `config` as Keras serializes them:
//! `{ class_name = "VarianceScaling", scale = 2.0, mode = "fan_in", distribution =
//! "truncated_normal", seed = 3 }`. [`Initializer`] serializes back to the table form.
//!
//! Values are drawn on the host ([`Initializer::sample`]) in the row-major order of Keras'
//! layout of the weight (Dense kernel `[in, units]`, Conv2D kernel `[kh, kw, in, out]`), with
//! fans as Keras' `compute_fans`. A `seed` makes the draws reproducible in kiln (a `StdRng`
//! seeded by it); they are not TensorFlow's values, whose Philox stream kiln does not
//! reproduce: the distributions are the same, the numbers are not.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};

/// The standard deviation of a standard normal truncated to `[-2, 2]`: Keras'
/// `VarianceScaling` divides its normal stddev by it so that the truncated draws have the
/// variance the formula asks for. Keras' literal, digit for digit.
#[allow(clippy::excessive_precision)]
pub const TRUNCATION_STDDEV: f64 = 0.879_625_661_034_239_78;

/// Which fan `VarianceScaling` divides its `scale` by ([`compute_fans`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FanMode {
    /// `fan_in`: inputs per output unit (He, LeCun).
    FanIn,
    /// `fan_out`: outputs per input unit.
    FanOut,
    /// `fan_avg`: `(fan_in + fan_out) / 2` (Glorot).
    FanAvg,
}

/// The distribution `VarianceScaling` draws from, with variance `scale / fan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScalingDistribution {
    /// Normal truncated at 2 stddev, stddev `sqrt(scale / fan) / 0.87962566103423978`
    /// (Keras' `"normal"` is this one).
    TruncatedNormal,
    /// Normal with stddev `sqrt(scale / fan)`.
    UntruncatedNormal,
    /// Uniform on `[-limit, limit]`, `limit = sqrt(3 * scale / fan)`.
    Uniform,
}

/// A Keras initializer. `seed`, where a variant has one, fixes the draws (see the module
/// docs); `None` draws from the generator passed to [`Initializer::sample`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "class_name")]
pub enum Initializer {
    /// `keras.initializers.GlorotUniform`: `VarianceScaling(1.0, "fan_avg", "uniform")`,
    /// uniform on `±sqrt(6 / (fan_in + fan_out))`.
    GlorotUniform {
        /// Fixes the draws.
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// `keras.initializers.GlorotNormal`: `VarianceScaling(1.0, "fan_avg", "truncated_normal")`.
    GlorotNormal {
        /// Fixes the draws.
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// `keras.initializers.HeNormal`: `VarianceScaling(2.0, "fan_in", "truncated_normal")`.
    HeNormal {
        /// Fixes the draws.
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// `keras.initializers.HeUniform`: `VarianceScaling(2.0, "fan_in", "uniform")`.
    HeUniform {
        /// Fixes the draws.
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// `keras.initializers.LecunNormal`: `VarianceScaling(1.0, "fan_in", "truncated_normal")`.
    LecunNormal {
        /// Fixes the draws.
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// `keras.initializers.LecunUniform`: `VarianceScaling(1.0, "fan_in", "uniform")`.
    LecunUniform {
        /// Fixes the draws.
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// `keras.initializers.VarianceScaling(scale=1.0, mode="fan_in",
    /// distribution="truncated_normal")`: variance `scale / fan` (see [`ScalingDistribution`]).
    VarianceScaling {
        /// Positive multiplier of the variance.
        scale: f64,
        /// The fan the variance is divided by.
        mode: FanMode,
        /// The distribution.
        distribution: ScalingDistribution,
        /// Fixes the draws.
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// `keras.initializers.Orthogonal(gain=1.0)`: the weight reshaped to
    /// `[prod(shape[..-1]), shape[-1]]` has orthonormal rows or columns (whichever are fewer),
    /// times `gain`; Q of the QR of a standard normal matrix, signs as Keras (`diag(R) > 0`).
    /// Rank 2 or more.
    Orthogonal {
        /// Multiplier.
        gain: f64,
        /// Fixes the draws.
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// `keras.initializers.RandomNormal(mean=0.0, stddev=0.05)`.
    RandomNormal {
        /// Mean.
        mean: f64,
        /// Standard deviation (positive).
        stddev: f64,
        /// Fixes the draws.
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// `keras.initializers.RandomUniform(minval=-0.05, maxval=0.05)`.
    RandomUniform {
        /// Lower bound.
        minval: f64,
        /// Upper bound (at least `minval`).
        maxval: f64,
        /// Fixes the draws.
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// `keras.initializers.TruncatedNormal(mean=0.0, stddev=0.05)`: normal draws more than 2
    /// `stddev` from `mean` are drawn again (no variance correction, as Keras).
    TruncatedNormal {
        /// Mean.
        mean: f64,
        /// Standard deviation of the normal before truncation (positive).
        stddev: f64,
        /// Fixes the draws.
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// `keras.initializers.Zeros`.
    Zeros,
    /// `keras.initializers.Ones`.
    Ones,
    /// `keras.initializers.Constant(value=0.0)`.
    Constant {
        /// The value of every element.
        value: f64,
    },
    /// `keras.initializers.Constant(value=[...])`: an array `value` (flat, row-major)
    /// broadcast to the weight's shape as Keras' `value * ones(shape)` does: either the
    /// weight's size, or the size of its last axis (repeated over the others). keras.io's
    /// PointNet starts a `Dense` bias at a flattened identity matrix this way.
    #[serde(rename = "Constant")]
    ConstantArray {
        /// The values.
        value: Vec<f64>,
    },
    /// `keras.initializers.Identity(gain=1.0)`: `gain` times the (rectangular) identity
    /// matrix; rank-2 weights only.
    Identity {
        /// Multiplier.
        gain: f64,
    },
}

impl Default for Initializer {
    /// `glorot_uniform`, Keras' default kernel initializer.
    fn default() -> Self {
        Initializer::GlorotUniform { seed: None }
    }
}

/// Keras' `compute_fans(shape)`: `(fan_in, fan_out)`. Rank 0: `(1, 1)`; rank 1: `(n, n)`;
/// rank 2: `(shape[0], shape[1])`; higher ranks multiply both by the receptive field, the
/// product of all dims but the last two (Conv2D `[kh, kw, in, out]`: `(kh*kw*in, kh*kw*out)`).
pub fn compute_fans(shape: &[usize]) -> (usize, usize) {
    match shape {
        [] => (1, 1),
        [n] => (*n, *n),
        [.., fan_in, fan_out] => {
            let field: usize = shape[..shape.len() - 2].iter().product();
            (fan_in * field, fan_out * field)
        }
    }
}

/// How values are drawn, once an initializer and a shape are known.
enum Plan {
    Fill(f32),
    /// These values, repeated to fill the weight.
    Repeat(Vec<f32>),
    Normal {
        mean: f64,
        stddev: f64,
    },
    Truncated {
        mean: f64,
        stddev: f64,
    },
    Uniform {
        min: f32,
        max: f32,
    },
    Orthogonal {
        gain: f64,
    },
    Identity {
        gain: f32,
    },
}

impl Initializer {
    /// Keras' snake_case name (`"glorot_uniform"`, `"variance_scaling"`).
    pub fn name(&self) -> &'static str {
        match self {
            Initializer::GlorotUniform { .. } => "glorot_uniform",
            Initializer::GlorotNormal { .. } => "glorot_normal",
            Initializer::HeNormal { .. } => "he_normal",
            Initializer::HeUniform { .. } => "he_uniform",
            Initializer::LecunNormal { .. } => "lecun_normal",
            Initializer::LecunUniform { .. } => "lecun_uniform",
            Initializer::VarianceScaling { .. } => "variance_scaling",
            Initializer::Orthogonal { .. } => "orthogonal",
            Initializer::RandomNormal { .. } => "random_normal",
            Initializer::RandomUniform { .. } => "random_uniform",
            Initializer::TruncatedNormal { .. } => "truncated_normal",
            Initializer::Zeros => "zeros",
            Initializer::Ones => "ones",
            Initializer::Constant { .. } | Initializer::ConstantArray { .. } => "constant",
            Initializer::Identity { .. } => "identity",
        }
    }

    /// The fixed seed, for the variants that take one.
    pub fn seed(&self) -> Option<u64> {
        match *self {
            Initializer::GlorotUniform { seed }
            | Initializer::GlorotNormal { seed }
            | Initializer::HeNormal { seed }
            | Initializer::HeUniform { seed }
            | Initializer::LecunNormal { seed }
            | Initializer::LecunUniform { seed }
            | Initializer::VarianceScaling { seed, .. }
            | Initializer::Orthogonal { seed, .. }
            | Initializer::RandomNormal { seed, .. }
            | Initializer::RandomUniform { seed, .. }
            | Initializer::TruncatedNormal { seed, .. } => seed,
            Initializer::Zeros
            | Initializer::Ones
            | Initializer::Constant { .. }
            | Initializer::ConstantArray { .. }
            | Initializer::Identity { .. } => None,
        }
    }

    /// `(scale, mode, distribution)` of the `VarianceScaling` family.
    fn variance_scaling(&self) -> Option<(f64, FanMode, ScalingDistribution)> {
        use FanMode::*;
        use ScalingDistribution::*;
        Some(match *self {
            Initializer::GlorotUniform { .. } => (1.0, FanAvg, Uniform),
            Initializer::GlorotNormal { .. } => (1.0, FanAvg, TruncatedNormal),
            Initializer::HeNormal { .. } => (2.0, FanIn, TruncatedNormal),
            Initializer::HeUniform { .. } => (2.0, FanIn, Uniform),
            Initializer::LecunNormal { .. } => (1.0, FanIn, TruncatedNormal),
            Initializer::LecunUniform { .. } => (1.0, FanIn, Uniform),
            Initializer::VarianceScaling {
                scale,
                mode,
                distribution,
                ..
            } => (scale, mode, distribution),
            _ => return None,
        })
    }

    /// Draws a weight of `shape` (Keras' layout, row-major). Variants with a `seed` draw from
    /// `StdRng::seed_from_u64(seed)` and leave `rng` untouched; the others draw from `rng`.
    /// `glorot_uniform` draws exactly what `model::init::glorot_uniform` draws from the same
    /// generator.
    ///
    /// # Errors
    /// [`KilnError::Shape`] when the shape does not suit the initializer (`orthogonal` below
    /// rank 2, `identity` not rank 2) or has more elements than memory allows.
    pub fn sample(&self, shape: &[usize], rng: &mut impl Rng) -> Result<Vec<f32>> {
        match self.seed() {
            Some(seed) => self.draw(shape, &mut StdRng::seed_from_u64(seed)),
            None => self.draw(shape, rng),
        }
    }

    fn draw<R: Rng + ?Sized>(&self, shape: &[usize], rng: &mut R) -> Result<Vec<f32>> {
        let n = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| self.shape_error(shape, "has more elements than fit in memory"))?;
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|_| {
            self.shape_error(shape, &format!("needs {n} values, more than memory allows"))
        })?;
        match self.plan(shape)? {
            Plan::Fill(v) => out.resize(n, v),
            Plan::Repeat(v) => out.extend(v.iter().cycle().take(n)),
            Plan::Uniform { min, max } => out.extend((0..n).map(|_| rng.random_range(min..=max))),
            Plan::Normal { mean, stddev } => {
                let mut g = Gaussian::default();
                out.extend((0..n).map(|_| (mean + stddev * g.next(rng)) as f32));
            }
            Plan::Truncated { mean, stddev } => {
                let mut g = Gaussian::default();
                out.extend((0..n).map(|_| (mean + stddev * g.truncated(rng)) as f32));
            }
            Plan::Orthogonal { gain } => orthogonal(shape, gain, rng, &mut out),
            Plan::Identity { gain } => {
                let cols = shape[1];
                out.extend((0..n).map(|i| if i / cols == i % cols { gain } else { 0.0 }));
            }
        }
        Ok(out)
    }

    fn plan(&self, shape: &[usize]) -> Result<Plan> {
        if let Some((scale, mode, distribution)) = self.variance_scaling() {
            let (fan_in, fan_out) = compute_fans(shape);
            let fan = match mode {
                FanMode::FanIn => fan_in as f64,
                FanMode::FanOut => fan_out as f64,
                FanMode::FanAvg => (fan_in + fan_out) as f64 / 2.0,
            }
            .max(1.0);
            return Ok(match distribution {
                // One rounding of 3 * scale / fan, as `glorot_uniform`'s 6 / (fan_in + fan_out).
                ScalingDistribution::Uniform => {
                    let limit = ((3.0 * scale) / fan).sqrt() as f32;
                    Plan::Uniform {
                        min: -limit,
                        max: limit,
                    }
                }
                ScalingDistribution::TruncatedNormal => Plan::Truncated {
                    mean: 0.0,
                    stddev: (scale / fan).sqrt() / TRUNCATION_STDDEV,
                },
                ScalingDistribution::UntruncatedNormal => Plan::Normal {
                    mean: 0.0,
                    stddev: (scale / fan).sqrt(),
                },
            });
        }
        Ok(match *self {
            Initializer::Zeros => Plan::Fill(0.0),
            Initializer::Ones => Plan::Fill(1.0),
            Initializer::Constant { value } => Plan::Fill(value as f32),
            Initializer::ConstantArray { ref value } => {
                if let Some(why) = self.unfit(shape) {
                    return Err(self.shape_error(shape, &why));
                }
                Plan::Repeat(value.iter().map(|&v| v as f32).collect())
            }
            Initializer::RandomNormal { mean, stddev, .. } => Plan::Normal { mean, stddev },
            Initializer::TruncatedNormal { mean, stddev, .. } => Plan::Truncated { mean, stddev },
            Initializer::RandomUniform { minval, maxval, .. } => Plan::Uniform {
                min: minval as f32,
                max: maxval as f32,
            },
            Initializer::Orthogonal { gain, .. } if shape.len() >= 2 => Plan::Orthogonal { gain },
            Initializer::Orthogonal { .. } => {
                return Err(self.shape_error(shape, "needs a weight of rank 2 or more"));
            }
            Initializer::Identity { gain } if shape.len() == 2 => {
                Plan::Identity { gain: gain as f32 }
            }
            Initializer::Identity { .. } => {
                return Err(self.shape_error(shape, "works on rank-2 weights (matrices) only"));
            }
            _ => unreachable!("the VarianceScaling family is planned above"),
        })
    }

    /// Why this initializer cannot fill a weight of `shape` (an array `Constant` whose size
    /// is neither the weight's nor its last axis'), or `None`.
    pub(super) fn unfit(&self, shape: &[usize]) -> Option<String> {
        let Initializer::ConstantArray { value } = self else {
            return None;
        };
        let size: usize = shape.iter().product();
        let last = shape.last().copied().unwrap_or(1);
        (value.len() != size && value.len() != last).then(|| {
            format!(
                "has {} values, which fit neither the weight's {size} values nor its last \
                 axis of {last}",
                value.len()
            )
        })
    }

    fn shape_error(&self, shape: &[usize], what: &str) -> KilnError {
        KilnError::Shape(format!(
            "initializer {} {what}; the weight has shape {shape:?}: choose another initializer \
             for it (e.g. \"glorot_uniform\")",
            self.name()
        ))
    }

    /// Reads an initializer from TOML: a name (`"he_normal"`, `"HeNormal"`, Keras' aliases
    /// `"normal"`, `"uniform"`, `"zero"`, `"one"`) or a table with `class_name` and Keras'
    /// arguments (flat or under `config`). `key` is the dotted config path named in errors.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming `key` (or `key.argument`) for an unknown name or
    /// argument, a wrong type, or a value out of range (`scale <= 0`, `stddev <= 0`,
    /// `minval > maxval`, an unknown `mode` or `distribution`, a negative `seed`).
    pub fn from_toml(value: &toml::Value, key: &str) -> Result<Initializer> {
        let mut obj = KerasObject::parse(value, key, "initializer", INITIALIZER_NAMES)?;
        let build = obj.resolve(INITIALIZERS, INITIALIZER_ALIASES)?;
        let init = build(&mut obj)?;
        obj.finish()?;
        Ok(init)
    }
}

type Build = fn(&mut KerasObject) -> Result<Initializer>;

/// Keras' class names and how each is read.
const INITIALIZERS: &[(&str, Build)] = &[
    ("GlorotUniform", |o| {
        Ok(Initializer::GlorotUniform { seed: o.seed()? })
    }),
    ("GlorotNormal", |o| {
        Ok(Initializer::GlorotNormal { seed: o.seed()? })
    }),
    ("HeNormal", |o| {
        Ok(Initializer::HeNormal { seed: o.seed()? })
    }),
    ("HeUniform", |o| {
        Ok(Initializer::HeUniform { seed: o.seed()? })
    }),
    ("LecunNormal", |o| {
        Ok(Initializer::LecunNormal { seed: o.seed()? })
    }),
    ("LecunUniform", |o| {
        Ok(Initializer::LecunUniform { seed: o.seed()? })
    }),
    ("VarianceScaling", read_variance_scaling),
    ("Orthogonal", |o| {
        Ok(Initializer::Orthogonal {
            gain: o.number("gain", 1.0)?,
            seed: o.seed()?,
        })
    }),
    ("RandomNormal", |o| {
        let (mean, stddev) = read_normal(o)?;
        Ok(Initializer::RandomNormal {
            mean,
            stddev,
            seed: o.seed()?,
        })
    }),
    ("TruncatedNormal", |o| {
        let (mean, stddev) = read_normal(o)?;
        Ok(Initializer::TruncatedNormal {
            mean,
            stddev,
            seed: o.seed()?,
        })
    }),
    ("RandomUniform", read_uniform),
    ("Zeros", |_| Ok(Initializer::Zeros)),
    ("Ones", |_| Ok(Initializer::Ones)),
    ("Constant", |o| match o.take("value") {
        Some(toml::Value::Array(items)) => Ok(Initializer::ConstantArray {
            value: o.numbers("value", items)?,
        }),
        other => {
            if let Some(v) = other {
                o.args.insert("value".into(), v);
            }
            Ok(Initializer::Constant {
                value: o.number("value", 0.0)?,
            })
        }
    }),
    ("Identity", |o| {
        Ok(Initializer::Identity {
            gain: o.number("gain", 1.0)?,
        })
    }),
];

/// Keras' extra identifiers (`keras/src/initializers/__init__.py`).
const INITIALIZER_ALIASES: &[(&str, &str)] = &[
    ("normal", "RandomNormal"),
    ("uniform", "RandomUniform"),
    ("zero", "Zeros"),
    ("one", "Ones"),
    ("IdentityInitializer", "Identity"),
    ("OrthogonalInitializer", "Orthogonal"),
];

const INITIALIZER_NAMES: &str = "\"glorot_uniform\", \"glorot_normal\", \"he_normal\", \
    \"he_uniform\", \"lecun_normal\", \"lecun_uniform\", \"variance_scaling\", \"orthogonal\", \
    \"random_normal\", \"random_uniform\", \"truncated_normal\", \"zeros\", \"ones\", \
    \"constant\", \"identity\" (or Keras' class names: \"GlorotUniform\", ...)";

fn read_variance_scaling(o: &mut KerasObject) -> Result<Initializer> {
    let scale = o.number("scale", 1.0)?;
    if scale <= 0.0 {
        return Err(o.error("scale", format!("must be a positive number, got {scale}")));
    }
    let mode = match o.text("mode", "fan_in")?.as_str() {
        "fan_in" => FanMode::FanIn,
        "fan_out" => FanMode::FanOut,
        "fan_avg" => FanMode::FanAvg,
        other => {
            return Err(o.error(
                "mode",
                format!("unknown mode \"{other}\"; allowed: \"fan_in\", \"fan_out\", \"fan_avg\""),
            ));
        }
    };
    // Keras lower-cases the distribution and reads "normal" as "truncated_normal".
    let distribution = match o
        .text("distribution", "truncated_normal")?
        .to_lowercase()
        .as_str()
    {
        "truncated_normal" | "normal" => ScalingDistribution::TruncatedNormal,
        "untruncated_normal" => ScalingDistribution::UntruncatedNormal,
        "uniform" => ScalingDistribution::Uniform,
        other => {
            return Err(o.error(
                "distribution",
                format!(
                    "unknown distribution \"{other}\"; allowed: \"truncated_normal\", \
                     \"untruncated_normal\", \"uniform\""
                ),
            ));
        }
    };
    Ok(Initializer::VarianceScaling {
        scale,
        mode,
        distribution,
        seed: o.seed()?,
    })
}

/// `mean` (default 0) and a positive `stddev` (default 0.05).
fn read_normal(o: &mut KerasObject) -> Result<(f64, f64)> {
    let mean = o.number("mean", 0.0)?;
    let stddev = o.number("stddev", 0.05)?;
    if stddev <= 0.0 {
        return Err(o.error("stddev", format!("must be a positive number, got {stddev}")));
    }
    Ok((mean, stddev))
}

fn read_uniform(o: &mut KerasObject) -> Result<Initializer> {
    let minval = o.number("minval", -0.05)?;
    let maxval = o.number("maxval", 0.05)?;
    if minval > maxval || !((maxval as f32) - (minval as f32)).is_finite() {
        return Err(o.error(
            "maxval",
            format!(
                "must be at least minval ({minval}) and within float32 range of it, got {maxval}"
            ),
        ));
    }
    Ok(Initializer::RandomUniform {
        minval,
        maxval,
        seed: o.seed()?,
    })
}

impl<'de> Deserialize<'de> for Initializer {
    /// Any value [`Initializer::from_toml`] reads; errors name the key `initializer`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let value = toml::Value::deserialize(d)?;
        Initializer::from_toml(&value, "initializer").map_err(serde::de::Error::custom)
    }
}

/// Standard normal draws by the Box-Muller transform (f64), each pair of uniforms giving two.
#[derive(Default)]
struct Gaussian {
    spare: Option<f64>,
}

impl Gaussian {
    fn next<R: Rng + ?Sized>(&mut self, rng: &mut R) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let u1 = 1.0 - rng.random::<f64>(); // (0, 1]: ln(u1) is finite
        let u2 = rng.random::<f64>();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
        self.spare = Some(r * s);
        r * c
    }

    /// A standard normal draw within `[-2, 2]`: draws outside are drawn again, as
    /// `tf.random.truncated_normal`.
    fn truncated<R: Rng + ?Sized>(&mut self, rng: &mut R) -> f64 {
        loop {
            let z = self.next(rng);
            if z.abs() <= 2.0 {
                return z;
            }
        }
    }
}

/// Keras' `Orthogonal`: a `[max(r, c), min(r, c)]` standard normal matrix (`r` = product of
/// all dims but the last, `c` = the last), Q of its QR with `diag(R) > 0` (Keras multiplies Q
/// by `sign(diag(R))`; Gram-Schmidt's R has a positive diagonal already), transposed when
/// `r < c`, times `gain`. Modified Gram-Schmidt, run twice per column for orthogonality to
/// rounding error, in f64.
fn orthogonal<R: Rng + ?Sized>(shape: &[usize], gain: f64, rng: &mut R, out: &mut Vec<f32>) {
    let cols = shape[shape.len() - 1];
    let rows: usize = shape[..shape.len() - 1].iter().product();
    let (tall, narrow) = (rows.max(cols), rows.min(cols));
    if narrow == 0 {
        return;
    }
    // q[j] is column j of the tall matrix; the draws fill it row-major as Keras' normal.
    let mut q = vec![vec![0.0f64; tall]; narrow];
    let mut g = Gaussian::default();
    for i in 0..tall {
        for column in q.iter_mut() {
            column[i] = g.next(rng);
        }
    }
    for j in 0..narrow {
        let (done, rest) = q.split_at_mut(j);
        let v = &mut rest[0];
        for _ in 0..2 {
            for u in done.iter() {
                let d: f64 = u.iter().zip(v.iter()).map(|(a, b)| a * b).sum();
                v.iter_mut().zip(u).for_each(|(x, a)| *x -= d * a);
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
    }
    let scaled = |v: &f64| (gain * v) as f32;
    if rows >= cols {
        // W = Q: row i of W holds element i of every column.
        for i in 0..rows {
            out.extend(q.iter().map(|column| scaled(&column[i])));
        }
    } else {
        // W = Q^T: row i of W is column i of Q.
        for column in &q {
            out.extend(column.iter().map(scaled));
        }
    }
}

/// A Keras object identifier read from TOML (`"he_normal"` or `{ class_name = "HeNormal",
/// seed = 1 }`), with typed access to its arguments; shared by the initializers,
/// [`super::regularizers`] and [`super::constraints`]. Arguments not asked for are errors
/// ([`KerasObject::finish`]).
pub(super) struct KerasObject<'k> {
    key: &'k str,
    /// The identifier as written.
    name: String,
    /// Where the name was written (`key` or `key.class_name`).
    name_key: String,
    args: toml::Table,
    asked: Vec<&'static str>,
}

impl<'k> KerasObject<'k> {
    /// Splits `value` into name and arguments; `what` (`"initializer"`) and `names` (the
    /// allowed names) word the errors.
    pub(super) fn parse(
        value: &toml::Value,
        key: &'k str,
        what: &str,
        names: &str,
    ) -> Result<KerasObject<'k>> {
        let shape_error = || {
            KilnError::config(
                key,
                format!(
                    "expected {} {what} name or a table with class_name and its arguments; \
                     allowed names: {names}",
                    if what.starts_with(['a', 'e', 'i', 'o', 'u']) {
                        "an"
                    } else {
                        "a"
                    }
                ),
            )
        };
        let (name, name_key, args) = match value {
            toml::Value::String(s) => (s.clone(), key.to_string(), toml::Table::new()),
            toml::Value::Table(t) => {
                let mut args = t.clone();
                let name_key = format!("{key}.class_name");
                let name = match args.remove("class_name") {
                    Some(toml::Value::String(s)) => s,
                    Some(_) => return Err(KilnError::config(name_key, "expected a string")),
                    None => {
                        return Err(KilnError::config(
                            name_key,
                            format!("missing; the {what} table names its class: {names}"),
                        ));
                    }
                };
                // Keras' serialized form nests the arguments under `config`.
                if let Some(config) = args.remove("config") {
                    let toml::Value::Table(config) = config else {
                        return Err(KilnError::config(
                            format!("{key}.config"),
                            "expected a table of arguments",
                        ));
                    };
                    args.extend(config);
                }
                (name, name_key, args)
            }
            _ => return Err(shape_error()),
        };
        Ok(KerasObject {
            key,
            name,
            name_key,
            args,
            asked: Vec::new(),
        })
    }

    /// The entry of `classes` whose Keras class name the identifier spells (snake_case or
    /// CamelCase, `_` and case ignored), directly or through `aliases` (alias, class name).
    pub(super) fn resolve<T: Copy>(
        &self,
        classes: &[(&str, T)],
        aliases: &[(&str, &str)],
    ) -> Result<T> {
        let wanted = squash(&self.name);
        let class = aliases
            .iter()
            .find(|(alias, _)| squash(alias) == wanted)
            .map_or(wanted, |(_, class)| squash(class));
        classes
            .iter()
            .find(|(name, _)| squash(name) == class)
            .map(|(_, t)| *t)
            .ok_or_else(|| {
                let allowed: Vec<String> = classes.iter().map(|(n, _)| snake_case(n)).collect();
                KilnError::config(
                    self.name_key.clone(),
                    format!(
                        "unknown name \"{}\"; allowed: {} (or Keras' class names)",
                        self.name,
                        allowed.join(", ")
                    ),
                )
            })
    }

    /// A config error at `key.field`.
    pub(super) fn error(&self, field: &str, message: impl Into<String>) -> KilnError {
        KilnError::config(format!("{}.{field}", self.key), message)
    }

    fn take(&mut self, field: &'static str) -> Option<toml::Value> {
        self.asked.push(field);
        self.args.remove(field)
    }

    /// A finite number (an integer is read as a number), `default` when absent.
    pub(super) fn number(&mut self, field: &'static str, default: f64) -> Result<f64> {
        let v = match self.take(field) {
            None => return Ok(default),
            Some(toml::Value::Float(f)) => f,
            Some(toml::Value::Integer(i)) => i as f64,
            Some(other) => {
                return Err(self.error(field, format!("expected a number, got {other}")));
            }
        };
        if !v.is_finite() {
            return Err(self.error(field, format!("must be a finite number, got {v}")));
        }
        Ok(v)
    }

    /// The finite numbers of an array `field` (at least one).
    fn numbers(&self, field: &'static str, items: Vec<toml::Value>) -> Result<Vec<f64>> {
        if items.is_empty() {
            return Err(self.error(field, "must hold at least one number"));
        }
        items
            .into_iter()
            .map(|v| match v {
                toml::Value::Float(f) if f.is_finite() => Ok(f),
                toml::Value::Integer(i) => Ok(i as f64),
                other => Err(self.error(field, format!("expected finite numbers, got {other}"))),
            })
            .collect()
    }

    /// A number that is at least 0.
    pub(super) fn non_negative(&mut self, field: &'static str, default: f64) -> Result<f64> {
        let v = self.number(field, default)?;
        if v < 0.0 {
            return Err(self.error(field, format!("must be at least 0, got {v}")));
        }
        Ok(v)
    }

    /// A string, `default` when absent.
    pub(super) fn text(&mut self, field: &'static str, default: &str) -> Result<String> {
        match self.take(field) {
            None => Ok(default.to_string()),
            Some(toml::Value::String(s)) => Ok(s),
            Some(other) => Err(self.error(field, format!("expected a string, got {other}"))),
        }
    }

    /// `seed`: absent, or an integer of at least 0.
    pub(super) fn seed(&mut self) -> Result<Option<u64>> {
        match self.take("seed") {
            None => Ok(None),
            Some(toml::Value::Integer(i)) if i >= 0 => Ok(Some(i as u64)),
            Some(other) => Err(self.error(
                "seed",
                format!("expected an integer of at least 0, got {other}"),
            )),
        }
    }

    /// An axis or a list of distinct axes (negative counts from the end), `default` when
    /// absent.
    pub(super) fn axes(&mut self, field: &'static str, default: i64) -> Result<Vec<i64>> {
        let items = match self.take(field) {
            None => return Ok(vec![default]),
            Some(toml::Value::Integer(i)) => vec![toml::Value::Integer(i)],
            Some(toml::Value::Array(a)) if !a.is_empty() => a,
            Some(other) => {
                return Err(self.error(
                    field,
                    format!("expected an axis (0) or a list of axes ([0, 1, 2]), got {other}"),
                ));
            }
        };
        let mut axes = Vec::with_capacity(items.len());
        for item in items {
            match item {
                toml::Value::Integer(i) if !axes.contains(&i) => axes.push(i),
                other => {
                    return Err(self.error(
                        field,
                        format!("expected distinct integer axes, got {other} in the list"),
                    ));
                }
            }
        }
        Ok(axes)
    }

    /// Refuses the arguments nobody asked for, naming the first and the allowed ones.
    pub(super) fn finish(self) -> Result<()> {
        match self.args.keys().next() {
            None => Ok(()),
            Some(extra) => {
                let allowed = if self.asked.is_empty() {
                    "it takes no arguments".to_string()
                } else {
                    format!("allowed: {}", self.asked.join(", "))
                };
                Err(self.error(
                    extra,
                    format!("unknown argument of \"{}\"; {allowed}", self.name),
                ))
            }
        }
    }
}

/// The name with `_` removed and lower-cased: `"glorot_uniform"` and `"GlorotUniform"` meet.
fn squash(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// A class name in snake_case for error messages: `"GlorotUniform"` -> `"glorot_uniform"`,
/// `"L1L2"` -> `"l1_l2"` (an `_` before each capital but the first; Keras writes `"l1l2"`,
/// and both are read).
fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if i > 0 && c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
pub(super) mod tests;
