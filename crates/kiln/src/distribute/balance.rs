//! Splitting a model's layers into pipeline stages ([`super::PipelineStrategy`]).
//!
//! A stage is a run of consecutive layers in the spec's order (`ModelSpec::layers`, the
//! layers Keras' `model.summary()` lists, `Input`s excluded). Stages are either given as
//! layer counts (torchgpipe's `balance=[a, b, …]`, kiln's `stages = [a, b, …]`) or balanced
//! automatically: each layer gets a cost ([`layer_costs`]) and the layers are cut into `k`
//! contiguous, non-empty runs whose largest total cost is as small as possible (the "linear
//! partition" problem, solved exactly by dynamic programming, [`partition`]).

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::error::{KilnError, Result};
use crate::model::{LayerKind, ModelSpec};

/// What automatic balancing equalizes across stages (`[distribute] balance_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BalanceBy {
    /// Parameters (trainable and not): each stage's weights, gradients and optimizer state,
    /// i.e. its device memory for a large model (default).
    #[default]
    Parameters,
    /// Forward floating-point operations per example ([`layer_costs`]): each stage's
    /// compute time.
    Flops,
}

/// How the layers are split (`[distribute] stages`): a number of stages, balanced
/// automatically, or each stage's number of layers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Stages {
    /// This many stages, balanced by [`BalanceBy`].
    Count(usize),
    /// Layers per stage, in order (they must add up to the model's layer count).
    Sizes(Vec<usize>),
}

impl<'de> Deserialize<'de> for Stages {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Stages, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Count(usize),
            Sizes(Vec<usize>),
        }
        Raw::deserialize(d)
            .map(|r| match r {
                Raw::Count(n) => Stages::Count(n),
                Raw::Sizes(s) => Stages::Sizes(s),
            })
            .map_err(|_| {
                serde::de::Error::custom(
                    "distribute.stages: expected a number of stages (at least 1), or each \
                     stage's number of layers as a list, e.g. stages = 2 or stages = [5, 2]",
                )
            })
    }
}

impl Stages {
    /// The number of stages.
    pub fn len(&self) -> usize {
        match self {
            Stages::Count(n) => *n,
            Stages::Sizes(s) => s.len(),
        }
    }

    /// True for zero stages (refused by validation).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Each layer's cost under `by`, in `spec.layers()` order.
///
/// - [`BalanceBy::Parameters`]: Keras' `count_params()` of the layer (trainable plus
///   non-trainable).
/// - [`BalanceBy::Flops`]: forward floating-point operations per example, counted as
///   2 × multiply-adds: a weight layer applies its weights at every output position
///   (`2 × trainable parameters × positions`, positions = output elements / last axis: 1 for
///   Dense on `[features]`, `height × width` for Conv2D, `steps` for a sequence), plus
///   `2 × 2 × steps² × features` for the attention scores and their weighted sum in
///   MultiHeadAttention / TransformerEncoder; Embedding lookups and parameter-free layers
///   cost one operation per output element. (The standard counting, e.g. Kaplan et al. 2020,
///   "Scaling Laws for Neural Language Models", §2.1.)
pub fn layer_costs(spec: &ModelSpec, by: BalanceBy) -> Vec<f64> {
    (0..spec.layers().len())
        .map(|i| {
            let (trainable, frozen) = spec.layer_params(i);
            match by {
                BalanceBy::Parameters => (trainable + frozen) as f64,
                BalanceBy::Flops => flops(spec, i, trainable),
            }
        })
        .collect()
}

fn flops(spec: &ModelSpec, i: usize, trainable: usize) -> f64 {
    let out = spec.shape_after(i);
    match &spec.layers()[i].kind {
        LayerKind::Declared(l) => l.flops(&spec.shapes_before(i), out, trainable),
        LayerKind::Input { .. } => 0.0,
    }
}

/// Cuts `costs` into `k` consecutive non-empty runs minimizing the largest run's total;
/// among those, the one whose runs are most even (smallest sum of squared totals); among
/// those, the one whose earlier stages are as large as possible (so a zero-cost layer such as
/// Flatten joins the stage before it). Returns the runs as index ranges covering
/// `0..costs.len()`. Two exact dynamic programs over (runs, layers), O(k·n²).
///
/// # Panics
/// When `k` is 0 or larger than `costs.len()` (checked by [`plan`] first).
pub fn partition(costs: &[f64], k: usize) -> Vec<Range<usize>> {
    let n = costs.len();
    assert!(k >= 1 && k <= n, "1 <= stages <= layers");
    let mut prefix = vec![0.0; n + 1];
    for (i, c) in costs.iter().enumerate() {
        prefix[i + 1] = prefix[i] + c;
    }
    let run = |a: usize, b: usize| prefix[b] - prefix[a];
    // First the smallest possible largest run, then the most even cut under that bound.
    let (largest, _) = cut_points(n, k, |best, i, j| best.max(run(i, j)), f64::INFINITY);
    let bound = largest[k][n];
    let (_, cut) = cut_points(
        n,
        k,
        |best, i, j| {
            let r = run(i, j);
            if r <= bound {
                best + r * r
            } else {
                f64::INFINITY
            }
        },
        f64::INFINITY,
    );
    let mut ranges = Vec::with_capacity(k);
    let mut end = n;
    for s in (1..=k).rev() {
        let start = cut[s][end];
        ranges.push(start..end);
        end = start;
    }
    ranges.reverse();
    ranges
}

/// `best[s][j]`: the best value of the first `j` layers in `s` runs, where a last run
/// `i..j` after a prefix worth `b` is worth `extend(b, i, j)`; `cut[s][j]` the start `i` of
/// that last run (the largest one among ties).
fn cut_points(
    n: usize,
    k: usize,
    extend: impl Fn(f64, usize, usize) -> f64,
    worst: f64,
) -> (Vec<Vec<f64>>, Vec<Vec<usize>>) {
    let mut best = vec![vec![worst; n + 1]; k + 1];
    let mut cut = vec![vec![0usize; n + 1]; k + 1];
    best[0][0] = 0.0;
    for s in 1..=k {
        for j in s..=n {
            for i in (s - 1..j).rev() {
                if best[s - 1][i] == worst {
                    continue;
                }
                let v = extend(best[s - 1][i], i, j);
                if v < best[s][j] {
                    best[s][j] = v;
                    cut[s][j] = i;
                }
            }
        }
    }
    (best, cut)
}

/// The layer ranges of each stage for `spec`.
///
/// # Errors
/// [`KilnError::Config`] (`distribute.stages`) when there are more stages than layers, a
/// stage has no layer, or the given sizes do not add up to the model's layer count.
pub fn plan(spec: &ModelSpec, stages: &Stages, by: BalanceBy) -> Result<Vec<Range<usize>>> {
    let n = spec.layers().len();
    match stages {
        Stages::Count(k) => {
            if *k == 0 || *k > n {
                return Err(KilnError::config(
                    "distribute.stages",
                    format!(
                        "{k} stage{} for a model of {n} layer{}: give between 1 and {n} (each \
                         stage runs at least one layer; without `stages` a pipeline has {})",
                        if *k == 1 { "" } else { "s" },
                        if n == 1 { "" } else { "s" },
                        super::DEFAULT_PIPELINE_STAGES,
                    ),
                ));
            }
            Ok(partition(&layer_costs(spec, by), *k))
        }
        Stages::Sizes(sizes) => {
            if let Some(s) = sizes.iter().position(|&s| s == 0) {
                return Err(KilnError::config(
                    format!("distribute.stages[{s}]"),
                    "is 0: each stage runs at least one layer",
                ));
            }
            if let Some(s) = sizes.iter().position(|&s| s > n) {
                return Err(KilnError::config(
                    format!("distribute.stages[{s}]"),
                    format!(
                        "is {} layers, but the model has {n} (`kiln train` prints its summary; \
                         Input layers do not count)",
                        sizes[s]
                    ),
                ));
            }
            let total = sizes.iter().fold(0usize, |a, &b| a.saturating_add(b));
            if total != n || sizes.is_empty() {
                return Err(KilnError::config(
                    "distribute.stages",
                    format!(
                        "{sizes:?} adds up to {total} layers, but the model has {n} \
                         (`kiln train` prints its summary; Input layers do not count)"
                    ),
                ));
            }
            let mut start = 0;
            Ok(sizes
                .iter()
                .map(|&s| {
                    start += s;
                    start - s..start
                })
                .collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute_force_best(costs: &[f64], k: usize) -> f64 {
        // Every way to place k - 1 cuts among n - 1 gaps.
        let n = costs.len();
        let mut best = f64::INFINITY;
        for mask in 0u32..(1 << (n - 1)) {
            if mask.count_ones() as usize != k - 1 {
                continue;
            }
            let (mut worst, mut acc) = (0.0f64, 0.0);
            for (i, c) in costs.iter().enumerate() {
                acc += c;
                if i == n - 1 || mask & (1 << i) != 0 {
                    worst = worst.max(acc);
                    acc = 0.0;
                }
            }
            best = best.min(worst);
        }
        best
    }

    #[test]
    fn partition_is_optimal_and_covers_every_layer() {
        let cases: [&[f64]; 4] = [
            &[0.0, 112.0, 51.0],
            &[5.0, 1.0, 1.0, 1.0, 1.0, 5.0],
            &[3.0, 0.0, 0.0, 7.0, 2.0, 2.0, 2.0, 9.0, 0.0],
            &[1.0; 7],
        ];
        for costs in cases {
            for k in 1..=costs.len() {
                let ranges = partition(costs, k);
                assert_eq!(ranges.len(), k);
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges[k - 1].end, costs.len());
                assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
                assert!(ranges.iter().all(|r| !r.is_empty()));
                let worst = ranges
                    .iter()
                    .map(|r| costs[r.clone()].iter().sum::<f64>())
                    .fold(0.0, f64::max);
                assert_eq!(worst, brute_force_best(costs, k), "{costs:?} in {k}");
            }
        }
        // A parameter-free layer after a cut point joins the earlier stage.
        assert_eq!(partition(&[0.0, 112.0, 51.0], 2), [0..2, 2..3]);
        assert_eq!(partition(&[4.0, 0.0, 0.0, 9.0], 2), [0..3, 3..4]);
        // Equal layers: 3 + 2 + 2, not 3 + 3 + 1.
        assert_eq!(partition(&[1.0; 7], 3), [0..3, 3..5, 5..7]);
    }

    fn cnn() -> ModelSpec {
        use crate::model::{Activation, Padding, Pair};
        ModelSpec::builder(&[28, 28, 1])
            .add(LayerKind::from(crate::model::layers::Conv2D {
                filters: 32,
                kernel_size: Pair([3, 3]),
                strides: Pair([1, 1]),
                padding: Padding::Valid,
                dilation_rate: Pair([1, 1]),
                groups: 1,
                activation: Activation::Relu,
                use_bias: true,
            }))
            .add(LayerKind::from(crate::model::layers::MaxPooling2D {
                pool_size: Pair([2, 2]),
                strides: None,
                padding: Padding::Valid,
            }))
            .add(LayerKind::from(crate::model::layers::Flatten {}))
            .add(LayerKind::from(crate::model::layers::Dense {
                units: 10,
                activation: Activation::Softmax,
                use_bias: true,
            }))
            .build()
            .unwrap()
    }

    /// The Fashion-MNIST CNN's costs, counted by hand: the convolution has 320 parameters
    /// applied at 26 × 26 positions (2 × 320 × 676 = 432,640 operations), the pooling and
    /// flattening one per output element (13 × 13 × 32 = 5,408), the Dense 54,090 parameters
    /// once (108,180).
    #[test]
    fn costs_by_parameters_and_by_flops() {
        let spec = cnn();
        assert_eq!(
            layer_costs(&spec, BalanceBy::Parameters),
            [320.0, 0.0, 0.0, 54_090.0]
        );
        assert_eq!(
            layer_costs(&spec, BalanceBy::Flops),
            [432_640.0, 5_408.0, 5_408.0, 108_180.0]
        );
        // By parameters the Dense layer is a stage of its own; by operations the convolution.
        let by_params = plan(&spec, &Stages::Count(2), BalanceBy::Parameters).unwrap();
        assert_eq!(by_params, [0..3, 3..4]);
        let by_flops = plan(&spec, &Stages::Count(2), BalanceBy::Flops).unwrap();
        assert_eq!(by_flops, [0..1, 1..4]);
    }

    #[test]
    fn given_sizes_are_checked_against_the_model() {
        let spec = cnn();
        let p = plan(&spec, &Stages::Sizes(vec![1, 3]), BalanceBy::Parameters).unwrap();
        assert_eq!(p, [0..1, 1..4]);
        let short = plan(&spec, &Stages::Sizes(vec![1, 2]), BalanceBy::Parameters)
            .unwrap_err()
            .to_string();
        assert!(
            short.contains("adds up to 3 layers, but the model has 4"),
            "{short}"
        );
        let zero = plan(&spec, &Stages::Sizes(vec![4, 0]), BalanceBy::Parameters)
            .unwrap_err()
            .to_string();
        assert!(zero.contains("distribute.stages[1]"), "{zero}");
        // Sizes that would overflow a sum are refused by the first one too large.
        let huge = plan(
            &spec,
            &Stages::Sizes(vec![usize::MAX, usize::MAX, 2]),
            BalanceBy::Parameters,
        )
        .unwrap_err()
        .to_string();
        assert!(huge.contains("distribute.stages[0]"), "{huge}");
        let many = plan(&spec, &Stages::Count(5), BalanceBy::Parameters)
            .unwrap_err()
            .to_string();
        assert!(many.contains("between 1 and 4"), "{many}");
    }
}
