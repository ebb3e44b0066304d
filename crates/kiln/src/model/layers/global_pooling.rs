//! The global pooling layers (`GlobalAveragePooling1D/2D/3D`, `GlobalMaxPooling1D/2D/3D`): the
//! mean or maximum over all steps or positions, per feature. [`GlobalPool`] holds what differs
//! between them; [`global_pooling_layer!`] writes each layer's type from it.

use burn::prelude::*;

use crate::model::act::Act;
use crate::onnx::{OnnxGraph, OnnxValue, int, ints};

/// What is taken, over which axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GlobalPool {
    /// The maximum rather than the mean.
    pub max: bool,
    /// Over the steps of `(steps, features)` (1), the positions of `(h, w, c)` (2) or of
    /// `(d, h, w, c)` (3).
    pub spatial: usize,
    /// Keras' class name.
    pub class: &'static str,
}

impl GlobalPool {
    /// `(features,)`, or `(1, features)` / `(1, 1, channels)` / `(1, 1, 1, channels)` with
    /// `keepdims`.
    pub(super) fn output_shape(
        self,
        input: &[usize],
        keepdims: bool,
    ) -> Result<Vec<usize>, String> {
        let features = match self.spatial {
            1 => super::steps_features(input, self.class)?[1],
            2 => super::image_shape(input, self.class)?[2],
            _ => super::volume_shape(input, self.class)?[3],
        };
        Ok(match keepdims {
            true => [vec![1; self.spatial], vec![features]].concat(),
            false => vec![features],
        })
    }

    /// The mean or maximum along axis 1 of `[rows, values, features]`, keeping it.
    fn reduce(self, t: Tensor<3>, axis: usize) -> Tensor<3> {
        match self.max {
            true => t.max_dim(axis),
            false => t.mean_dim(axis),
        }
    }

    /// Sequences reduce along the steps (`[n, s, f]`); images and volumes along the positions
    /// of each channel (`[n, c, h * w]`, `[n, c, d * h * w]`).
    pub(super) fn forward(self, x: Act, keepdims: bool) -> Act {
        match (x, keepdims) {
            (Act::Seq(t), true) => Act::Seq(self.reduce(t, 1)),
            (Act::Seq(t), false) => Act::Flat(self.reduce(t, 1).squeeze_dim(1)),
            (Act::Image(t), keep) => {
                let [n, c, _, _] = t.dims();
                let pooled = self.reduce(t.flatten(2, 3), 2);
                match keep {
                    true => Act::Image(pooled.reshape([n, c, 1, 1])),
                    false => Act::Flat(pooled.reshape([n, c])),
                }
            }
            (Act::Volume(t), keep) => {
                let [n, c, _, _, _] = t.dims();
                let pooled = self.reduce(t.flatten(2, 4), 2);
                match keep {
                    true => Act::Volume(pooled.reshape([n, c, 1, 1, 1])),
                    false => Act::Flat(pooled.reshape([n, c])),
                }
            }
            (other, _) => panic!("shape checks guarantee a sequence or an image, got {other:?}"),
        }
    }

    /// [`GlobalPool::forward`] honouring a `[batch, steps]` mask: the 1-D average is the mean
    /// over the unmasked steps (Keras' `GlobalAveragePooling1D`; the other global poolings
    /// ignore masks, as Keras').
    pub(super) fn forward_masked(self, x: Act, mask: Option<Tensor<2>>, keepdims: bool) -> Act {
        match (x, mask) {
            (Act::Seq(t), Some(m)) if !self.max && self.spatial == 1 => {
                let m = m.unsqueeze_dim::<3>(2);
                let mean = (t * m.clone()).sum_dim(1) / m.sum_dim(1);
                match keepdims {
                    true => Act::Seq(mean),
                    false => Act::Flat(mean.squeeze_dim(1)),
                }
            }
            (x, _) => self.forward(x, keepdims),
        }
    }

    /// The maximum keeps the index of each maximum (an int64, two float32 values' worth) per
    /// output value; the mean keeps nothing.
    pub(super) fn extra_kept(self, output: &[usize]) -> f64 {
        match self.max {
            true => 2.0 * super::size(output),
            false => 0.0,
        }
    }

    /// Reads every input value once.
    pub(super) fn flops(self, input: &[usize]) -> f64 {
        super::size(input)
    }

    /// `ReduceMean`/`ReduceMax` over the steps (axis 1), the NCHW positions (axes 2, 3) or the
    /// NCDHW positions (axes 2, 3, 4).
    pub(super) fn onnx(
        self,
        g: &mut OnnxGraph,
        x: &OnnxValue,
        name: &str,
        keepdims: bool,
    ) -> String {
        let op = if self.max { "ReduceMax" } else { "ReduceMean" };
        let axes: &[i64] = match self.spatial {
            1 => &[1],
            2 => &[2, 3],
            _ => &[2, 3, 4],
        };
        let attrs = vec![ints("axes", axes), int("keepdims", keepdims as i64)];
        g.node(name, op, &[&x.name], attrs)
    }
}

/// Declares the global pooling layer type `$name` (argument `keepdims = false`) doing `$pool`.
macro_rules! global_pooling_layer {
    ($(#[$doc:meta])* $name:ident, max: $max:expr, spatial: $spatial:expr, aliases: $aliases:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// Keep the pooled axes with size 1 (`(1, 1, c)` rather than `(c,)`).
            #[serde(default)]
            pub keepdims: bool,
        }

        impl $name {
            const POOL: super::global_pooling::GlobalPool = super::global_pooling::GlobalPool {
                max: $max,
                spatial: $spatial,
                class: stringify!($name),
            };
        }

        impl $crate::model::layer::Layer for $name {
            $crate::serde_layer!();
            fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
                Self::POOL.output_shape(inputs[0], self.keepdims)
            }
            fn forward(
                &self,
                mut inputs: Vec<$crate::model::act::Act>,
                _: &$crate::model::layer::Weights,
                _: $crate::model::layer::ForwardContext,
            ) -> $crate::model::act::Act {
                Self::POOL.forward(inputs.remove(0), self.keepdims)
            }
            fn forward_masked(
                &self,
                mut inputs: Vec<$crate::model::act::Act>,
                masks: &[Option<burn::prelude::Tensor<2>>],
                _: &$crate::model::layer::Weights,
                _: $crate::model::layer::ForwardContext,
            ) -> $crate::model::act::Act {
                let mask = masks.first().cloned().flatten();
                Self::POOL.forward_masked(inputs.remove(0), mask, self.keepdims)
            }
            fn saves_input(&self) -> bool {
                false
            }
            fn takes_volumes(&self) -> bool {
                Self::POOL.spatial == 3
            }
            fn extra_kept(&self, _: &[&[usize]], output: &[usize]) -> f64 {
                Self::POOL.extra_kept(output)
            }
            fn passes_values(&self) -> bool {
                Self::POOL.max
            }
            // Over steps (1-D) it may average under a float32 mask; images have none.
            fn computes_in_half(&self) -> bool {
                Self::POOL.spatial != 1
            }
            fn flops(&self, inputs: &[&[usize]], _: &[usize], _: usize) -> f64 {
                Self::POOL.flops(inputs[0])
            }
            fn onnx(
                &self,
                g: &mut $crate::onnx::OnnxGraph,
                inputs: &[$crate::onnx::OnnxValue],
                name: &str,
            ) -> Result<String, String> {
                Ok(Self::POOL.onnx(g, &inputs[0], name, self.keepdims))
            }
        }

        impl $crate::model::layer::LayerConfig for $name {
            const CLASS_NAME: &'static str = stringify!($name);
            const ALIASES: &'static [&'static str] = $aliases;
        }
    };
}

pub(super) use global_pooling_layer;
