//! Keras' Adam and AdamW as a Burn optimizer ([`burn::optim::Optimizer`]), so that
//! [`burn::optim::ModuleOptimizer`] drives it over a model's parameters.
//!
//! The update follows Keras 3 exactly (see [`crate::kernels::adam`] for the formulas and their
//! source): on the flex CPU backend with float32 parameters it is one fused, in-place pass per
//! parameter ([`crate::ops::KilnOps::kiln_adam`]); elsewhere the same formulas run as Burn
//! tensor operations. The state is Burn's [`AdaptiveMomentumState`] (step, first and second
//! moments), so it records and loads like Burn's own Adam state.

use burn::optim::{AdaptiveMomentumState, LearningRate, Optimizer};
use burn::prelude::*;

use crate::ops::{AdamArgs, KilnOps, fast_path};

/// The weights, first and second moments, and AMSGrad's running maximum after an update.
type AdamTensors<const D: usize> = (Tensor<D>, Tensor<D>, Tensor<D>, Option<Tensor<D>>);

/// Adam (`weight_decay` 0) or AdamW with Keras' formulas.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KerasAdam {
    /// First-moment decay.
    pub beta_1: f64,
    /// Second-moment decay.
    pub beta_2: f64,
    /// Denominator fuzz, added to `√v` (Keras), not to the bias-corrected `√v̂` (Burn).
    pub epsilon: f64,
    /// Decoupled weight decay; 0 for Adam.
    pub weight_decay: f64,
    /// AMSGrad (Reddi et al., 2018): divide by the running maximum of `v` (kept in the
    /// state's `max_moment_2`) instead of `v`; runs as tensor operations.
    pub amsgrad: bool,
}

impl Optimizer for KerasAdam {
    type State<const D: usize> = AdaptiveMomentumState<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        let (m, v, v_max, step) = match state {
            Some(s) => (s.moment_1, s.moment_2, s.max_moment_2, s.time + 1),
            None => (grad.zeros_like(), grad.zeros_like(), None, 1),
        };
        if self.amsgrad {
            let v_max = v_max.unwrap_or_else(|| grad.zeros_like());
            let (w, m, v, v_max) = self.tensor_update(tensor, m, v, Some(v_max), grad, lr, step);
            let mut state = AdaptiveMomentumState::new(step, m, v);
            state.max_moment_2 = v_max;
            return (w, Some(state));
        }
        let args: AdamArgs = [
            lr,
            self.beta_1,
            self.beta_2,
            self.epsilon,
            self.weight_decay,
            step as f64,
        ];
        let (w, m, v) = if fast_path(&tensor.device(), tensor.dtype()) {
            let (w, m, v) = burn::backend::Dispatch::kiln_adam(
                tensor.into_dispatch(),
                m.into_dispatch(),
                v.into_dispatch(),
                grad.into_dispatch(),
                args,
            );
            (
                Tensor::from_dispatch(w),
                Tensor::from_dispatch(m),
                Tensor::from_dispatch(v),
            )
        } else {
            let (w, m, v, _) = self.tensor_update(tensor, m, v, None, grad, lr, step);
            (w, m, v)
        };
        (w, Some(AdaptiveMomentumState::new(step, m, v)))
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
        state.to_device(device)
    }
}

impl KerasAdam {
    /// The update as Burn tensor operations (GPU backends, other dtypes, AMSGrad). With
    /// `v_max` (AMSGrad), the denominator uses `max(v_max, v)`, returned as the new `v_max`.
    #[allow(clippy::too_many_arguments)]
    fn tensor_update<const D: usize>(
        &self,
        w: Tensor<D>,
        m: Tensor<D>,
        v: Tensor<D>,
        v_max: Option<Tensor<D>>,
        g: Tensor<D>,
        lr: f64,
        step: usize,
    ) -> AdamTensors<D> {
        let t = step as i32;
        let alpha = lr * (1.0 - self.beta_2.powi(t)).sqrt() / (1.0 - self.beta_1.powi(t));
        let m = m.clone() + (g.clone() - m).mul_scalar(1.0 - self.beta_1);
        let v = v.clone() + (g.powi_scalar(2) - v).mul_scalar(1.0 - self.beta_2);
        let v_max = v_max.map(|x| x.max_pair(v.clone()));
        let denominator = v_max.clone().unwrap_or_else(|| v.clone());
        let w = w.mul_scalar(1.0 - lr * self.weight_decay)
            - (m.clone() / (denominator.sqrt().add_scalar(self.epsilon))).mul_scalar(alpha);
        (w, m, v, v_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fused CPU path and the tensor-operation path agree, and both give Keras' numbers
    /// (the kernel's test holds the Keras reference; this checks the wiring and the state).
    #[test]
    // The Keras answers keep all the digits Python printed (float32 values as float64 text).
    #[allow(clippy::excessive_precision)]
    fn fused_and_tensor_paths_agree_over_steps() {
        let device = Device::flex();
        let opt = KerasAdam {
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-7,
            weight_decay: 0.004,
            amsgrad: false,
        };
        let w0 = Tensor::<2>::from_data(
            TensorData::new(vec![0.5f32, -1.25, 2.0, 0.0], [2, 2]),
            &device,
        );
        let grads = [
            [0.1f32, -0.2, 0.3, 0.0],
            [-0.05, 0.4, 0.1, 1e-3],
            [0.2, 0.2, -0.3, -2.0],
        ];
        let (mut w, mut state) = (w0.clone(), None);
        let (mut w_ref, mut m_ref, mut v_ref) = (w0.clone(), w0.zeros_like(), w0.zeros_like());
        for (i, g) in grads.iter().enumerate() {
            let g = Tensor::<2>::from_data(TensorData::new(g.to_vec(), [2, 2]), &device);
            let (nw, ns) = opt.step(0.01, w, g.clone(), state);
            (w, state) = (nw, ns);
            (w_ref, m_ref, v_ref, _) = opt.tensor_update(w_ref, m_ref, v_ref, None, g, 0.01, i + 1);
        }
        let got = w.into_data().try_to_vec::<f32>().unwrap();
        let want = w_ref.into_data().try_to_vec::<f32>().unwrap();
        for (a, e) in got.iter().zip(&want) {
            assert!((a - e).abs() <= 1e-6, "{got:?} vs {want:?}");
        }
        // Keras 3.15: AdamW(learning_rate=0.01) after these three gradients (kernels::adam).
        let keras = [
            0.48069703578948975f32,
            -1.2487043142318726,
            1.9805668592453003,
            -0.0010323133319616318,
        ];
        for (a, e) in got.iter().zip(&keras) {
            assert!((a - e).abs() <= 2e-6 * (1.0 + e.abs()), "{got:?}");
        }
        assert_eq!(state.unwrap().time, 3);
    }
}
