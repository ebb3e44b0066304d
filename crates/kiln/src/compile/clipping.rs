//! Keras' gradient clipping (`clipnorm`, `clipvalue`, `global_clipnorm`), applied to Burn's
//! [`GradientsParams`] of a module's parameters.
//!
//! Formulas (Keras 3, `keras/src/optimizers/base_optimizer.py`, `_clip_gradients`,
//! `_clip_by_norm`, `clip_by_global_norm`; TensorFlow's `tf.clip_by_global_norm` is the same):
//!
//! - `clipnorm = c`, per tensor `g`: `g * c / max(‖g‖₂, c)`;
//! - `clipvalue = v`, elementwise: `clip(g, -v, v)`;
//! - `global_clipnorm = c`, over all gradients at once: `n = sqrt(Σ_g Σ g²)`,
//!   `scale = c * min(1 / n, 1 / c) + (n - n)`, every `g * scale`. Zero gradients (`n = 0`)
//!   pass unchanged; a non-finite `n` (an `inf` or `NaN` gradient) makes every gradient `NaN`,
//!   exactly as TensorFlow does, so that `TerminateOnNaN` sees it.
//!
//! Norms are computed in float32, as TensorFlow does for float32 gradients (gradients of another
//! float dtype are cast to float32 for the norm; the scale is cast back). Sums of squares are
//! taken per tensor and then added in the module's parameter order, so the global norm agrees
//! with TensorFlow's to float32 rounding, not bit for bit. Everything stays on the device: no
//! value is read back to the host.
//!
//! Burn's own `GradientClipping::Norm` is per tensor only; this module is why kiln does not use
//! it.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::FloatDType;

/// One of Keras' three clipping rules (Keras allows at most one per optimizer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clipping {
    /// `clipnorm`: each gradient tensor rescaled to an L2 norm of at most this value.
    Norm(f64),
    /// `clipvalue`: each element clipped to `[-value, value]`.
    Value(f64),
    /// `global_clipnorm`: all gradients rescaled together to a global L2 norm of at most this
    /// value (`tf.clip_by_global_norm`).
    GlobalNorm(f64),
}

impl Clipping {
    /// Clips `grads`, the gradients of `module`'s parameters (parameters without a gradient are
    /// skipped; gradients of parameters not in `module` are left out of the global norm and
    /// unchanged).
    pub fn apply<M: Module>(&self, module: &M, mut grads: GradientsParams) -> GradientsParams {
        match *self {
            Clipping::Norm(c) => map_grads(module, &mut grads, &mut ByNorm(c)),
            Clipping::Value(v) => map_grads(module, &mut grads, &mut ByValue(v)),
            Clipping::GlobalNorm(c) => {
                if let Some(norm) = global_norm(module, &grads) {
                    // TensorFlow: clip_norm * min(1 / norm, 1 / clip_norm), plus (norm - norm)
                    // to turn an inf or NaN norm into NaN.
                    let scale = norm.clone().recip().clamp_max(1.0 / c).mul_scalar(c)
                        + (norm.clone() - norm);
                    map_grads(module, &mut grads, &mut Scale(scale));
                }
            }
        }
        grads
    }
}

/// `sqrt(Σ g²)` over all of `module`'s parameter gradients in `grads`, in float32, as a `[1]`
/// tensor on the gradients' device; `None` when no parameter has a gradient.
pub fn global_norm<M: Module>(module: &M, grads: &GradientsParams) -> Option<Tensor<1>> {
    let mut squares = SumOfSquares { grads, sum: None };
    module.visit(&mut squares);
    squares.sum.map(Tensor::sqrt)
}

/// A function of one gradient tensor of any rank.
trait GradFn {
    fn call<const D: usize>(&mut self, g: Tensor<D>) -> Tensor<D>;
}

/// Keras' `_clip_by_norm` for one tensor: `g * c / max(‖g‖₂, c)`.
struct ByNorm(f64);

impl GradFn for ByNorm {
    fn call<const D: usize>(&mut self, g: Tensor<D>) -> Tensor<D> {
        let dtype = FloatDType::from(g.dtype());
        let norm = g.clone().cast(FloatDType::F32).square().sum().sqrt();
        let denom: Tensor<D> = norm.clamp_min(self.0).cast(dtype).unsqueeze();
        g.mul_scalar(self.0) / denom
    }
}

/// `clip(g, -v, v)`.
struct ByValue(f64);

impl GradFn for ByValue {
    fn call<const D: usize>(&mut self, g: Tensor<D>) -> Tensor<D> {
        g.clamp(-self.0, self.0)
    }
}

/// Multiplies each gradient by a `[1]` scale (broadcast, cast to the gradient's dtype).
struct Scale(Tensor<1>);

impl GradFn for Scale {
    fn call<const D: usize>(&mut self, g: Tensor<D>) -> Tensor<D> {
        let s: Tensor<D> = self.0.clone().cast(FloatDType::from(g.dtype())).unsqueeze();
        g * s
    }
}

/// Replaces each of `module`'s gradients in `grads` by `f(gradient)`.
fn map_grads<M: Module, F: GradFn>(module: &M, grads: &mut GradientsParams, f: &mut F) {
    struct Map<'a, F> {
        grads: &'a mut GradientsParams,
        f: &'a mut F,
    }
    impl<F: GradFn> ModuleVisitor for Map<'_, F> {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            if let Some(g) = self.grads.remove::<D>(p.id) {
                self.grads.register::<D>(p.id, self.f.call(g));
            }
        }
    }
    module.visit(&mut Map { grads, f });
}

struct SumOfSquares<'a> {
    grads: &'a GradientsParams,
    sum: Option<Tensor<1>>,
}

impl ModuleVisitor for SumOfSquares<'_> {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(p.id) {
            let s = g.cast(FloatDType::F32).square().sum();
            self.sum = Some(match self.sum.take() {
                Some(acc) => acc + s,
                None => s,
            });
        }
    }
}

#[cfg(test)]
mod tests;
