//! Out-of-memory recovery in the training step: the batch computed in parts.
//!
//! When computing a batch's gradients runs out of memory, [`super::GradientAccumulation`]
//! catches the failure, releases what the attempt held (`Device::memory_cleanup`), and
//! computes the same batch again in twice as many parts, each part's loss weighted by its
//! share of the batch's examples and the parts' gradients summed: the gradient of the whole
//! batch's mean loss, so the optimizer update (and the global batch size, and
//! `gradient_accumulation_steps`' meaning) stay the same. This is Lightning's "halve the batch
//! and double the accumulation" with the bookkeeping kept inside one step. The run goes on with
//! that many parts per batch (memory does not come back by itself) and halves again on the next
//! failure, down to one example per part, where it gives up with
//! [`crate::KilnError::OutOfMemory`].
//!
//! Exactly the same result, up to float rounding, for models without BatchNormalization
//! (whose batch statistics are then per part, and whose moving averages are updated per part)
//! and Dropout (other masks).
//!
//! How failures are seen: Burn's GPU backends (cubecl) report an allocation failure by
//! panicking with an "out of memory" / "out of device memory" message; the step runs under
//! `std::panic::catch_unwind` and treats such a panic as an out-of-memory failure (any other
//! panic is re-raised). On the CPU an allocation failure aborts the process (Rust's global
//! allocator), so nothing can be caught there; the path is exercised on CPU builds by an
//! injected failure: the environment variable `KILN_TEST_OOM_AT_STEP=n` (or
//! [`super::GradientAccumulation::inject_oom_at`]) makes the first attempt of the `n`-th
//! training batch (0-based, counted from the start of the `fit` call) fail as if it ran out of
//! memory.

use burn::prelude::*;

use crate::batch::DeviceBatch;

/// Environment variable of the injected failure (a 0-based batch index).
pub const INJECT_ENV: &str = "KILN_TEST_OOM_AT_STEP";

/// The panic payload of an injected out-of-memory failure.
#[derive(Debug)]
pub struct InjectedOom;

/// The batch index of `KILN_TEST_OOM_AT_STEP`, if set to a number.
pub fn injection_from_env() -> Option<u64> {
    std::env::var(INJECT_ENV).ok()?.trim().parse().ok()
}

/// Whether a panic payload is an allocation failure: [`InjectedOom`], or a message
/// mentioning running out of memory (cubecl's `OutOfMemory` errors: "out of device memory
/// allocating …", "An out-of-memory error happened during launch").
pub fn is_out_of_memory(payload: &(dyn std::any::Any + Send)) -> bool {
    if payload.is::<InjectedOom>() {
        return true;
    }
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("")
        .to_ascii_lowercase();
    [
        "out of memory",
        "out-of-memory",
        "out of device memory",
        "outofmemory",
    ]
    .iter()
    .any(|k| text.contains(k))
}

/// The device of a batch's features.
pub fn device_of(batch: &DeviceBatch) -> Device {
    batch.x.device()
}

/// `batch` cut into `parts` consecutive parts along the batch axis (sizes as equal as can be,
/// the first ones one larger, [`crate::distribute::even_sizes`]; never an empty part: fewer
/// parts when the batch is smaller; one part is the batch itself, even an empty one).
pub fn split(batch: &DeviceBatch, parts: usize) -> Vec<DeviceBatch> {
    let n = batch.size;
    let parts = parts.clamp(1, n.max(1));
    if parts == 1 {
        return vec![batch.clone()];
    }
    crate::distribute::split_batch(batch.clone(), &crate::distribute::even_sizes(n, parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::Labels;
    use crate::model::Act;

    #[test]
    fn parts_cover_the_batch_in_order() {
        let d = Device::flex();
        let x = Tensor::<2>::from_data(
            TensorData::new((0..10).map(|v| v as f32).collect::<Vec<_>>(), [5, 2]),
            &d,
        );
        let y = Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, 1, 2, 3, 4], [5]), &d);
        let batch = DeviceBatch {
            more: Vec::new(),
            x: Act::Flat(x),
            labels: Some(Labels::Sparse(y)),
            classes: vec![0, 1, 2, 3, 4],
            targets: Vec::new(),
            outputs: vec![],
            size: 5,
            sample_weight: None,
        };
        let parts = split(&batch, 2);
        assert_eq!(parts.iter().map(|p| p.size).collect::<Vec<_>>(), vec![3, 2]);
        let Act::Flat(second) = &parts[1].x else {
            panic!()
        };
        let v = second.clone().into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(v, vec![6.0, 7.0, 8.0, 9.0]);
        assert_eq!(parts[1].classes, vec![3, 4]);
        // More parts than examples: one example each.
        assert_eq!(split(&batch, 8).len(), 5);
    }

    #[test]
    fn out_of_memory_panics_are_recognised() {
        let cubecl = String::from("out of device memory allocating 1073741824 bytes\n");
        assert!(is_out_of_memory(&cubecl));
        assert!(is_out_of_memory(
            &"An out-of-memory error happened during launch"
        ));
        assert!(is_out_of_memory(&InjectedOom));
        assert!(!is_out_of_memory(&"index out of bounds"));
        assert!(!is_out_of_memory(&42u8));
    }
}
