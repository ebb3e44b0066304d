//! Histogram buckets as TensorFlow 2's `tf.summary.histogram` computes them
//! (`tensorboard/plugins/histogram/summary_v2.py`, `_buckets`), so kiln's histograms look the
//! same in TensorBoard as Keras' for the same weights.

/// `tf.summary.histogram`'s default number of buckets.
pub const DEFAULT_BUCKET_COUNT: usize = 30;

/// Groups `data` into `bucket_count` buckets `[left, right, count]` (TensorFlow's `[k, 3]`
/// float64 histogram tensor), with TensorFlow's arithmetic, in float64:
///
/// * empty data: `bucket_count` rows of zeros;
/// * a single distinct value `v`: every row is `[v, v, 0]` except the last, `[v, v, n]`;
/// * otherwise, with `min`, `max`, `width = (max - min) / bucket_count`: value `x` goes to
///   bucket `min(floor((x - min) / width), bucket_count - 1)`; the edges are
///   `min + width * i` (`tf.linspace`), the first exactly `min` and the last exactly `max`.
///
/// kiln differs from TensorFlow on purpose for non-finite values: NaN and ±Inf are left out
/// (TensorFlow's result is undefined for them: its bucket index is a cast of NaN). Bucket
/// count 0 gives no rows.
pub fn buckets(data: &[f32], bucket_count: usize) -> Vec<[f64; 3]> {
    let values: Vec<f64> = data
        .iter()
        .filter(|v| v.is_finite())
        .map(|&v| v as f64)
        .collect();
    if bucket_count == 0 {
        return Vec::new();
    }
    if values.is_empty() {
        return vec![[0.0; 3]; bucket_count];
    }
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let range = max - min;
    if range == 0.0 {
        let mut rows = vec![[max, max, 0.0]; bucket_count];
        rows[bucket_count - 1][2] = values.len() as f64;
        return rows;
    }
    let n = bucket_count as f64;
    let width = range / n;
    let mut counts = vec![0.0f64; bucket_count];
    for x in &values {
        let index = ((x - min) / width).floor() as usize;
        counts[index.min(bucket_count - 1)] += 1.0;
    }
    let edge = |i: usize| match i {
        0 => min,
        i if i == bucket_count => max,
        i => min + width * i as f64,
    };
    (0..bucket_count)
        .map(|i| [edge(i), edge(i + 1), counts[i]])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_values_match_tensorflow() {
        // TensorFlow 2.21: tf.summary.histogram("h", [1, 2, 2, 3, 10], step=0) writes 30
        // buckets of width 0.3 from 1 to 10 (read back from its event file): 1.0 in bucket 0,
        // 2.0 twice in bucket 3 (floor(1 / 0.3) = 3), 3.0 in bucket 6, 10.0 in the last.
        let rows = buckets(&[1.0, 2.0, 2.0, 3.0, 10.0], 30);
        assert_eq!(rows.len(), 30);
        assert_eq!(rows[0][0], 1.0);
        assert_eq!(rows[0][1].to_bits(), 0x3FF4_CCCC_CCCC_CCCD); // 1.3, TF's bytes
        assert_eq!(rows[29][1], 10.0);
        let counts: Vec<(usize, f64)> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r[2] > 0.0)
            .map(|(i, r)| (i, r[2]))
            .collect();
        assert_eq!(counts, vec![(0, 1.0), (3, 2.0), (6, 1.0), (29, 1.0)]);
        for pair in rows.windows(2) {
            assert_eq!(pair[0][1], pair[1][0], "buckets are contiguous");
        }
    }

    #[test]
    fn one_distinct_value_fills_the_last_bucket() {
        let rows = buckets(&[4.0, 4.0], 30);
        assert!(rows.iter().all(|r| r[0] == 4.0 && r[1] == 4.0));
        assert_eq!(rows[29][2], 2.0);
        assert_eq!(rows[..29].iter().map(|r| r[2]).sum::<f64>(), 0.0);
    }

    #[test]
    fn empty_and_non_finite_data_give_zero_rows() {
        assert_eq!(buckets(&[], 3), vec![[0.0; 3]; 3]);
        assert_eq!(buckets(&[f32::NAN, f32::INFINITY], 2), vec![[0.0; 3]; 2]);
        assert!(buckets(&[1.0], 0).is_empty());
        // A NaN among finite values is left out of the counts.
        let rows = buckets(&[0.0, f32::NAN, 1.0], 2);
        assert_eq!(rows, vec![[0.0, 0.5, 1.0], [0.5, 1.0, 1.0]]);
    }
}
