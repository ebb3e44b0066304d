//! Sizes, counts and rates of a config checked at load against what this machine can do:
//! worker threads (kiln-data starts real threads for `num_parallel_calls`) and memory (what a
//! buffer holds at the least, at 4 bytes — one `float32` — per value).
//!
//! These are lower bounds, so a value refused here cannot work whatever the data: 2^62
//! prefetched batches, a `one_hot` of depth 2^40, a 100000x100000 `resize`. Values that pass
//! may still be too large for the real data; that is `kiln estimate`'s job (and kiln-data's
//! allocations are checked again, see `kiln_data::alloc`).

use kiln_data::alloc::human;

use super::pipeline::{OpConfig, PipelineConfig};
use crate::error::{KilnError, Result};

/// Bytes of one value at the least (`float32`: the model's inputs and one-hot labels).
const VALUE_BYTES: u64 = 4;

/// `num_parallel_calls` (threads) at `key`: at most [`kiln_data::system::max_parallel_calls`].
///
/// # Errors
/// [`KilnError::Config`] naming `key`, the value and the limit.
pub fn check_threads(key: &str, n: Option<usize>) -> Result<()> {
    let max = kiln_data::system::max_parallel_calls();
    match n {
        Some(n) if n > max => Err(KilnError::config(
            key,
            format!(
                "{n} threads is more than the {max} this machine runs for one map (8 per core, \
                 at least 64; {} cores here); use \"AUTOTUNE\" or at most {max}",
                kiln_data::system::cores()
            ),
        )),
        _ => Ok(()),
    }
}

/// A buffer of `dims` values at `key` (`value` is the setting as written): refused when it
/// cannot fit in the memory available (or its size overflows).
///
/// # Errors
/// [`KilnError::Config`] naming `key`, the value, the bytes it needs and the memory there is.
pub fn check_memory(key: &str, value: &str, what: &str, dims: &[usize]) -> Result<()> {
    let bytes = dims
        .iter()
        .try_fold(VALUE_BYTES, |n, &d| n.checked_mul(d as u64));
    let available = kiln_data::system::available_memory();
    let problem = match (bytes, available) {
        (None, _) => "more bytes than a 64-bit machine can address".to_string(),
        (Some(b), Some(a)) if b > a => {
            format!(
                "at least {}, more than the {} of memory available",
                human(b),
                human(a)
            )
        }
        _ => return Ok(()),
    };
    Err(KilnError::config(
        key,
        format!("{value}: {what} needs {problem}; use a smaller value"),
    ))
}

/// Every size and count of one pipeline table (`key` = `data.train`, ...).
///
/// # Errors
/// As [`check_threads`] and [`check_memory`].
pub fn check_pipeline(key: &str, p: &PipelineConfig) -> Result<()> {
    check_threads(&format!("{key}.num_parallel_calls"), p.num_parallel_calls)?;
    let batch = p.batch_size.unwrap_or(1);
    let k = |name: &str| format!("{key}.{name}");
    if let Some(b) = p.batch_size {
        check_memory(&k("batch_size"), &b.to_string(), "one batch", &[b])?;
    }
    if let Some(n) = p.prefetch {
        let what = format!("prefetching {n} batches of {batch}");
        check_memory(&k("prefetch"), &n.to_string(), &what, &[n, batch])?;
    }
    // Each op's own batch first: the most specific key.
    for (i, op) in p.map.iter().enumerate() {
        check_op(&format!("{key}.map[{i}]"), op, batch)?;
    }
    if let Some(s) = &p.shuffle {
        // The buffer holds elements after the ops that run before it (those before the first
        // random op): at least as many values as the largest of their outputs.
        let element = p.map[..p.random_from()]
            .iter()
            .map(op_values)
            .max()
            .unwrap_or(1);
        let n = s.buffer_size;
        let what = format!("the shuffle buffer ({n} elements of at least {element} values)");
        check_memory(
            &k("shuffle.buffer_size"),
            &n.to_string(),
            &what,
            &[n, element],
        )?;
    }
    if let Some([h, w]) = p.image_size {
        let what = format!("a batch of {batch} images of {h}x{w}");
        check_memory(
            &k("image_size"),
            &format!("[{h}, {w}]"),
            &what,
            &[batch, h, w],
        )?;
    }
    Ok(())
}

/// Values one element holds at the least after `op` (1 for ops that keep sizes).
fn op_values(op: &OpConfig) -> usize {
    match op {
        OpConfig::OneHot { depth, .. } => *depth,
        OpConfig::Resize { height, width, .. } | OpConfig::RandomCrop { height, width, .. } => {
            height.saturating_mul(*width)
        }
        _ => 1,
    }
}

fn check_op(key: &str, op: &OpConfig, batch: usize) -> Result<()> {
    match op {
        OpConfig::OneHot { depth, .. } => {
            let what = format!("a batch of {batch} one-hot rows");
            check_memory(
                &format!("{key}.depth"),
                &depth.to_string(),
                &what,
                &[batch, *depth],
            )
        }
        OpConfig::Resize { height, width, .. } | OpConfig::RandomCrop { height, width, .. } => {
            let what = format!("a batch of {batch} images of {height}x{width}");
            let value = format!("{height}x{width}");
            check_memory(
                &format!("{key}.height"),
                &value,
                &what,
                &[batch, *height, *width],
            )
        }
        OpConfig::Reshape { shape, .. } => {
            let dims: Vec<usize> = shape.iter().map(|&d| d.max(1) as usize).collect();
            check_memory(
                &format!("{key}.shape"),
                &format!("{shape:?}"),
                "one element",
                &dims,
            )
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_past_the_limit_are_refused() {
        let max = kiln_data::system::max_parallel_calls();
        check_threads("data.train.num_parallel_calls", Some(max)).unwrap();
        check_threads("k", None).unwrap();
        let e = check_threads("data.train.num_parallel_calls", Some(1 << 62))
            .unwrap_err()
            .to_string();
        assert!(e.contains("data.train.num_parallel_calls"), "{e}");
        assert!(
            e.contains("4611686018427387904 threads") && e.contains(&format!("at most {max}")),
            "{e}"
        );
    }

    #[test]
    fn buffers_past_memory_are_refused() {
        check_memory("k", "10", "x", &[32, 28, 28]).unwrap();
        let e = check_memory(
            "data.train.prefetch",
            "4611686018427387904",
            "p",
            &[1 << 62, 32],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("more bytes than a 64-bit machine can address"),
            "{e}"
        );
        let e = check_memory(
            "data.train.map[0].depth",
            "1099511627776",
            "one-hot",
            &[32, 1 << 40],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("data.train.map[0].depth") && e.contains("128.00 TiB"),
            "{e}"
        );
        assert!(e.contains("of memory available"), "{e}");
    }
}
