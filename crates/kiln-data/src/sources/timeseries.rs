//! [`Dataset::timeseries_dataset_from_array`]: sliding windows over a time series, as Keras'
//! `keras.utils.timeseries_dataset_from_array` (`keras/src/utils/timeseries_dataset_utils.py`).

use std::sync::Arc;

use crate::dataset::{Dataset, Parallelism};
use crate::element::{Array, Element};
use crate::error::{DataError, Result};
use crate::sources::RANGE_COMPONENT;

/// The window arguments of `timeseries_dataset_from_array` (Keras' names and defaults, without
/// `batch_size`, `shuffle` and `seed`, which are the pipeline's own `batch` and `shuffle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeseriesOptions {
    /// Time steps per window.
    pub sequence_length: usize,
    /// Steps between the starts of two consecutive windows (Keras' default 1).
    pub sequence_stride: usize,
    /// Steps between two time steps inside a window (Keras' default 1).
    pub sampling_rate: usize,
    /// First time step used (default 0).
    pub start_index: usize,
    /// Time steps from `end_index` on are not used (default: the data's length).
    pub end_index: Option<usize>,
}

impl TimeseriesOptions {
    /// Windows of `sequence_length` steps, Keras' defaults otherwise.
    pub fn new(sequence_length: usize) -> TimeseriesOptions {
        TimeseriesOptions {
            sequence_length,
            sequence_stride: 1,
            sampling_rate: 1,
            start_index: 0,
            end_index: None,
        }
    }

    /// The first step of each window, relative to `start_index`, for data of `steps` time
    /// steps and `targets` targets (Keras: `num_seqs = end - start - (length - 1) * rate`,
    /// capped at the number of targets; starts `0, stride, 2 stride, …` below it).
    ///
    /// # Errors
    /// [`DataError::InvalidArgument`] naming the argument (`sequence_length`,
    /// `sequence_stride`, `sampling_rate`, `start_index`, `end_index`) when no window fits or
    /// an argument is zero or past the data.
    pub fn window_starts(&self, steps: usize, targets: Option<usize>) -> Result<Vec<usize>> {
        let bad = |m: String| Err(DataError::InvalidArgument(m));
        if self.sequence_length == 0 {
            return bad("sequence_length must be at least 1".into());
        }
        if self.sequence_stride == 0 {
            return bad("sequence_stride must be at least 1 (the steps between windows)".into());
        }
        if self.sampling_rate == 0 {
            return bad("sampling_rate must be at least 1 (the steps inside a window)".into());
        }
        let end = self.end_index.unwrap_or(steps);
        if end > steps {
            return bad(format!(
                "end_index {end} is past the data's {steps} time steps"
            ));
        }
        if self.start_index >= end {
            return bad(format!(
                "start_index {} leaves no data before end_index {end}",
                self.start_index
            ));
        }
        let span = (self.sequence_length - 1) * self.sampling_rate + 1;
        let usable = end - self.start_index;
        if span > usable {
            return bad(format!(
                "sequence_length {} at sampling_rate {} spans {span} time steps, but the data \
                 holds {usable} (from start_index to end_index); shorten the windows",
                self.sequence_length, self.sampling_rate
            ));
        }
        let mut count = usable + 1 - span;
        if let Some(t) = targets {
            count = count.min(t.saturating_sub(self.start_index));
        }
        Ok((0..count).step_by(self.sequence_stride).collect())
    }
}

impl Dataset {
    /// `keras.utils.timeseries_dataset_from_array(data, targets, sequence_length,
    /// sequence_stride, sampling_rate, start_index, end_index)` without batching: element `i`
    /// holds the window `data[start + s_i + k * sampling_rate]` for `k < sequence_length`
    /// (shape `[sequence_length, …]`, the data's dtype) as component `names.0`, and with
    /// `targets`, `targets[start + s_i]` as `names.1`, where `s_i = i * sequence_stride`.
    /// `data` is `[time, …]` (a `[time]` series gives windows `[sequence_length]`).
    ///
    /// Windows are cut lazily, when iterated. Cardinality is exact.
    ///
    /// # Errors
    /// As [`TimeseriesOptions::window_starts`]; [`DataError::Shape`] for a scalar `data`.
    pub fn timeseries_dataset_from_array(
        data: Array,
        targets: Option<Array>,
        names: (&str, &str),
        options: TimeseriesOptions,
    ) -> Result<Dataset> {
        let steps = *data.shape().first().ok_or_else(|| {
            DataError::Shape("timeseries data must have a time axis, not be a scalar".into())
        })?;
        let target_count = match &targets {
            Some(t) => Some(*t.shape().first().ok_or_else(|| {
                DataError::Shape("timeseries targets must have a time axis".into())
            })?),
            None => None,
        };
        let starts = options.window_starts(steps, target_count)?;
        let (data, targets) = (Arc::new(data), Arc::new(targets));
        let (x, y) = (names.0.to_string(), names.1.to_string());
        let n = starts.len() as i64;
        let window = move |e: Element| -> Result<Element> {
            let i = e.require(RANGE_COMPONENT)?.data().to_i64()[0] as usize;
            let first = options.start_index + starts[i];
            let rows: Vec<Array> = (0..options.sequence_length)
                .map(|k| data.row(first + k * options.sampling_rate))
                .collect();
            let mut out = Element::new().with(x.as_str(), Array::stack(&rows)?);
            if let Some(t) = targets.as_ref() {
                out.insert(y.as_str(), t.row(first));
            }
            Ok(out)
        };
        Ok(Dataset::range(0, n, 1).map(window, Parallelism::Sequential))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::Buffer;

    fn series(n: usize) -> Array {
        Array::new(vec![n], Buffer::I64((0..n as i64).collect())).unwrap()
    }

    fn collect(ds: &Dataset, name: &str) -> Vec<Vec<i64>> {
        ds.iter()
            .map(|e| e.unwrap().require(name).unwrap().data().to_i64())
            .collect()
    }

    fn options(length: usize, stride: usize, rate: usize) -> TimeseriesOptions {
        TimeseriesOptions {
            sequence_stride: stride,
            sampling_rate: rate,
            ..TimeseriesOptions::new(length)
        }
    }

    fn windows(data: Array, targets: Option<Array>, o: TimeseriesOptions) -> Vec<[Vec<i64>; 2]> {
        let ds = Dataset::timeseries_dataset_from_array(data, targets, ("x", "y"), o).unwrap();
        let [xs, ys] = [collect(&ds, "x"), collect(&ds, "y")];
        assert_eq!(
            ds.cardinality(),
            crate::Cardinality::Finite(xs.len() as u64)
        );
        let ys = if ys.is_empty() {
            vec![vec![]; xs.len()]
        } else {
            ys
        };
        xs.into_iter().zip(ys).map(|(x, y)| [x, y]).collect()
    }

    // Keras 3.15 answers from tests/reference/timeseries_reference.py.
    #[test]
    fn windows_and_targets_follow_keras() {
        // Docstring example 1: every other step, target = the step after the window.
        let targets = Array::new(vec![90], Buffer::I64((10..100).collect())).unwrap();
        let w = windows(series(100), Some(targets), options(10, 1, 2));
        assert_eq!(w.len(), 82);
        let steps = |a: i64| (a..a + 20).step_by(2).collect::<Vec<i64>>();
        assert_eq!(w[0], [steps(0), vec![10]]);
        assert_eq!(w[1], [steps(1), vec![11]]);
        assert_eq!(w[81], [steps(81), vec![91]]);
        // Docstring example 2: next-step prediction; 5 targets cap the 6 windows.
        let targets = Array::new(vec![5], Buffer::I64((3..8).collect())).unwrap();
        let w = windows(series(8), Some(targets), options(3, 1, 1));
        assert_eq!(w.len(), 5);
        assert_eq!(w[4], [vec![4, 5, 6], vec![7]]);
    }

    #[test]
    fn stride_start_and_end_on_features_follow_keras() {
        let data = Array::new(vec![30, 2], Buffer::I64((0..60).collect())).unwrap();
        let targets = Array::new(vec![30], Buffer::I64((0..300).step_by(10).collect())).unwrap();
        let o = TimeseriesOptions {
            start_index: 2,
            end_index: Some(25),
            ..options(4, 3, 2)
        };
        let w = windows(data, Some(targets), o);
        assert_eq!(w.len(), 6);
        assert_eq!(w[0], [vec![4, 5, 8, 9, 12, 13, 16, 17], vec![20]]);
        assert_eq!(w[1], [vec![10, 11, 14, 15, 18, 19, 22, 23], vec![50]]);
        assert_eq!(w[5], [vec![34, 35, 38, 39, 42, 43, 46, 47], vec![170]]);
        let ds = Dataset::timeseries_dataset_from_array(
            Array::new(vec![30, 2], Buffer::I64(vec![0; 60])).unwrap(),
            None,
            ("x", "y"),
            options(4, 3, 2),
        )
        .unwrap();
        let first = ds.iter().next().unwrap().unwrap();
        assert_eq!(first.require("x").unwrap().shape(), &[4, 2]);
        assert!(first.get("y").is_none());
    }

    #[test]
    fn bad_windows_are_one_line_errors_naming_the_argument() {
        let err = |o: TimeseriesOptions| {
            let Err(e) = Dataset::timeseries_dataset_from_array(series(5), None, ("x", "y"), o)
            else {
                panic!("{o:?} gives windows");
            };
            e.to_string()
        };
        // Keras yields no windows here; kiln says why.
        let e = err(options(6, 1, 1));
        assert!(
            e.contains("sequence_length 6") && e.contains("holds 5"),
            "{e}"
        );
        assert!(err(options(3, 0, 1)).contains("sequence_stride must be at least 1"));
        assert!(err(options(3, 1, 0)).contains("sampling_rate must be at least 1"));
        assert!(err(options(3, 1, 3)).contains("spans 7 time steps"));
        let past = TimeseriesOptions {
            end_index: Some(9),
            ..options(2, 1, 1)
        };
        assert!(err(past).contains("end_index 9 is past"));
        for e in [err(options(6, 1, 1)), err(options(3, 0, 1))] {
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
