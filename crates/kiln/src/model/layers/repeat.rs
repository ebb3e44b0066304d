//! Repeating each step of `[rows, steps, features]` values a number of times: what
//! `RepeatVector`, `UpSampling1D` and `UpSampling2D` (rows, then columns) do, on Burn tensors
//! and in ONNX graphs.

use burn::prelude::*;

use crate::onnx::OnnxGraph;

/// `[rows, steps, features]` to `[rows, steps * times, features]`, each step `times` times in a
/// row (`np.repeat` along axis 1).
pub(super) fn repeat_steps(t: Tensor<3>, times: usize) -> Tensor<3> {
    let [rows, steps, features] = t.dims();
    t.reshape([rows, steps, 1, features])
        .repeat_dim(2, times)
        .reshape([rows, steps * times, features])
}

/// [`repeat_steps`] in an ONNX graph: `x` read as `[-1, steps, features]` (any leading axes
/// fold into the first) becomes `[-1, steps * times, features]` (`Reshape`, `Expand`,
/// `Reshape`).
pub(super) fn onnx_repeat_steps(
    g: &mut OnnxGraph,
    name: &str,
    x: &str,
    [steps, features]: [usize; 2],
    times: usize,
) -> String {
    let [s, f, t] = [steps, features, times].map(|d| d as i64);
    let split = g.reshape(name, x, &[-1, s, 1, f]);
    let shape = g.int64s(name, &[1, 1, t, 1]);
    let repeated = g.node(name, "Expand", &[&split, &shape], vec![]);
    g.reshape(name, &repeated, &[-1, s * t, f])
}
