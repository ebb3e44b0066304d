//! Splitting a global batch across replicas.

use crate::batch::{DeviceBatch, HostLabels};
use crate::compile::Labels;
use crate::model::Act;

/// Examples per replica when a batch of `global` examples is split across `replicas`
/// replicas, in replica order: `ceil(global / replicas)` each, the last replicas getting
/// what is left (fewer, or none).
///
/// This is what `tf.distribute.MirroredStrategy.experimental_distribute_dataset` does,
/// batch by batch, including a dataset's smaller last batch. Measured with TensorFlow 2.21 by
/// `tests/reference/distribute_rebatch.py` (2–4 logical CPU replicas): 7 examples on 2
/// replicas give `[4, 3]`, on 3 `[3, 3, 1]`, on 4 `[2, 2, 2, 1]`; 5 on 4 give `[2, 2, 1, 0]`;
/// `range(13).batch(9)` on 3 gives `[3, 3, 3]` then `[2, 2, 0]` (the last batch is split by
/// its own size, not by the full batch's). With `replicas == 0` the result is empty.
pub fn split_sizes(global: usize, replicas: usize) -> Vec<usize> {
    if replicas == 0 {
        return Vec::new();
    }
    let per = global.div_ceil(replicas);
    let mut left = global;
    (0..replicas)
        .map(|_| {
            let n = per.min(left);
            left -= n;
            n
        })
        .collect()
}

/// `total` examples in `parts` parts as equal as can be, the first `total % parts` one
/// larger: 4 in 3 gives `[2, 1, 1]` (where [`split_sizes`] gives TensorFlow's `[2, 2, 0]`).
/// With `parts == 0` the result is empty.
pub fn even_sizes(total: usize, parts: usize) -> Vec<usize> {
    (0..parts)
        .map(|i| total / parts + usize::from(i < total % parts))
        .collect()
}

/// Splits `batch` into consecutive parts of `sizes` examples (which must add up to
/// `batch.size`), dropping empty parts: the non-empty parts in order. Tensors are narrowed
/// on their first axis (no copy on the CPU backend); the host copies are split alike.
///
/// # Panics
/// When `sizes` does not add up to `batch.size` (a caller's bug, not user input).
pub fn split_batch(batch: DeviceBatch, sizes: &[usize]) -> Vec<DeviceBatch> {
    assert_eq!(
        sizes.iter().sum::<usize>(),
        batch.size,
        "replica sizes must cover the batch"
    );
    // Labels, host copies and weights hold one row per output position.
    let positions = batch
        .labels
        .as_ref()
        .map_or(1, Labels::rows)
        .checked_div(batch.size)
        .unwrap_or(1)
        .max(1);
    let narrow = |a: &Act, start: usize, n: usize| match a {
        Act::Flat(t) => Act::Flat(t.clone().narrow(0, start, n)),
        Act::Seq(t) => Act::Seq(t.clone().narrow(0, start, n)),
        Act::Image(t) => Act::Image(t.clone().narrow(0, start, n)),
        Act::Volume(t) => Act::Volume(t.clone().narrow(0, start, n)),
    };
    let mut start = 0;
    let mut parts = Vec::new();
    for &n in sizes {
        if n == 0 {
            continue;
        }
        let (rows_start, rows) = (start * positions, n * positions);
        let all_rows = batch.size * positions;
        let host = |h: &HostLabels| host_rows(h, all_rows, rows_start, rows);
        let own = host(&HostLabels {
            classes: batch.classes.clone(),
            targets: batch.targets.clone(),
        });
        parts.push(DeviceBatch {
            x: narrow(&batch.x, start, n),
            more: batch.more.iter().map(|a| narrow(a, start, n)).collect(),
            labels: batch.labels.as_ref().map(|l| l.narrow(rows_start, rows)),
            classes: own.classes,
            targets: own.targets,
            outputs: batch.outputs.iter().map(host).collect(),
            size: n,
            sample_weight: batch
                .sample_weight
                .as_ref()
                .map(|w| w.clone().narrow(0, rows_start, rows)),
        });
        start += n;
    }
    parts
}

/// Rows `start..start + rows` of host labels that hold `all_rows` rows.
fn host_rows(h: &HostLabels, all_rows: usize, start: usize, rows: usize) -> HostLabels {
    let units = h.targets.len().checked_div(all_rows).unwrap_or(0);
    HostLabels {
        classes: h
            .classes
            .get(start..start + rows)
            .map(<[i64]>::to_vec)
            .unwrap_or_default(),
        targets: h
            .targets
            .get(start * units..(start + rows) * units)
            .map(<[f32]>::to_vec)
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::prelude::*;

    /// The per-replica sizes TensorFlow 2.21 produced (`tests/reference/distribute_rebatch.py`,
    /// output recorded in its docstring).
    #[test]
    fn sizes_match_tensorflow_rebatching() {
        assert_eq!(split_sizes(7, 2), [4, 3]);
        assert_eq!(split_sizes(5, 2), [3, 2]);
        assert_eq!(split_sizes(2, 2), [1, 1]);
        assert_eq!(split_sizes(7, 3), [3, 3, 1]);
        assert_eq!(split_sizes(5, 3), [2, 2, 1]);
        assert_eq!(split_sizes(2, 3), [1, 1, 0]);
        assert_eq!(split_sizes(7, 4), [2, 2, 2, 1]);
        assert_eq!(split_sizes(5, 4), [2, 2, 1, 0]);
        assert_eq!(split_sizes(2, 4), [1, 1, 0, 0]);
        assert_eq!(split_sizes(9, 3), [3, 3, 3]);
        assert_eq!(split_sizes(4, 3), [2, 2, 0]);
        assert_eq!(split_sizes(0, 2), [0, 0]);
        assert!(split_sizes(3, 0).is_empty());
        assert_eq!(even_sizes(4, 3), [2, 1, 1]);
        assert_eq!(even_sizes(5, 2), [3, 2]);
        assert_eq!(even_sizes(2, 4), [1, 1, 0, 0]);
        assert!(even_sizes(3, 0).is_empty());
    }

    #[test]
    fn parts_are_consecutive_rows_with_their_host_copies() {
        let dev = Device::flex();
        let x: Vec<f32> = (0..10).map(|v| v as f32).collect();
        let batch = DeviceBatch {
            more: Vec::new(),
            x: Act::Flat(Tensor::from_data(TensorData::new(x, [5, 2]), &dev)),
            labels: Some(Labels::Dense(Tensor::from_data(
                TensorData::new((0..5).map(|v| v as f32).collect::<Vec<_>>(), [5, 1]),
                &dev,
            ))),
            classes: vec![0, 1, 2, 3, 4],
            targets: vec![10.0, 11.0, 12.0, 13.0, 14.0],
            outputs: vec![],
            size: 5,
            sample_weight: Some(Tensor::from_data(
                TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0], [5]),
                &dev,
            )),
        };
        let parts = split_batch(batch, &split_sizes(5, 4));
        assert_eq!(parts.len(), 3, "the empty fourth replica is dropped");
        assert_eq!(parts.iter().map(|p| p.size).collect::<Vec<_>>(), [2, 2, 1]);
        let Act::Flat(x) = &parts[1].x else {
            panic!("flat")
        };
        assert_eq!(
            x.clone().into_data().try_to_vec::<f32>().unwrap(),
            [4.0, 5.0, 6.0, 7.0]
        );
        assert_eq!(parts[2].classes, [4]);
        assert_eq!(parts[1].targets, [12.0, 13.0]);
        let w = parts[2].sample_weight.clone().unwrap().into_data();
        assert_eq!(w.try_to_vec::<f32>().unwrap(), [5.0]);
        let Some(Labels::Dense(y)) = &parts[0].labels else {
            panic!("dense labels")
        };
        assert_eq!(
            y.clone().into_data().try_to_vec::<f32>().unwrap(),
            [0.0, 1.0]
        );
    }
}
