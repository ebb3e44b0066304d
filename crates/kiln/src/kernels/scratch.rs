//! Per-thread scratch buffers for the kernels' temporary matrices (im2col columns, gathered
//! output gradients), reused from call to call: allocating and zeroing tens of megabytes per
//! training step was a measurable share of it (see `bench/README.md`).

use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Calls `f` with a buffer of `len` floats owned by this thread. Its contents are whatever the
/// previous user left: `f` must write every element it reads. A nested call on the same thread
/// gets a fresh allocation.
pub fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
            f(&mut buf[..len])
        }
        Err(_) => f(&mut vec![0.0; len]),
    })
}

#[cfg(test)]
mod tests {
    use super::with_scratch;

    #[test]
    fn buffers_have_the_asked_length_and_nest() {
        with_scratch(5, |a| {
            assert_eq!(a.len(), 5);
            a.fill(1.0);
            with_scratch(3, |b| {
                assert_eq!(b.len(), 3);
                b.fill(2.0);
            });
            assert!(a.iter().all(|&v| v == 1.0), "a nested call must not alias");
        });
        with_scratch(8, |a| assert_eq!(a.len(), 8));
    }
}
