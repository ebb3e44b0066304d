//! `keras.layers.SpatialDropout1D(rate, seed=None)`: Dropout of whole feature channels of a
//! sequence while training; the identity at inference.

use serde::{Deserialize, Serialize};

use super::noise::noise_layer;
use crate::model::act::Act;
use crate::model::layer::{ForwardContext, Layer, LayerConfig, Weights};

/// `SpatialDropout1D(rate, seed)` on `(steps, channels)`: each channel of each example is
/// zeroed at every step with probability `rate`, the others scaled by `1 / (1 - rate)`.
/// kiln draws from the run's seeded generator; `seed` is accepted for Keras configs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpatialDropout1D {
    /// Fraction of channels dropped, in `[0, 1)`.
    pub rate: f64,
    /// Keras' seed (accepted; kiln's draws follow the run's seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl Layer for SpatialDropout1D {
    crate::serde_layer!();
    noise_layer!(channels steps_features);
}

impl LayerConfig for SpatialDropout1D {
    const CLASS_NAME: &'static str = "SpatialDropout1D";
}
