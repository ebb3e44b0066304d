//! A stop request from outside the training loop (a signal handler), read after every step.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

/// A stop request from outside `fit` (a signal handler sets the signal number; 0 = none). `fit`
/// checks it after every batch: it finishes that batch, writes a checkpoint (with
/// BackupAndRestore) and returns [`crate::KilnError::Interrupted`].
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Arc<AtomicI32>);

impl Interrupt {
    /// A flag nobody has set.
    pub fn new() -> Interrupt {
        Interrupt::default()
    }

    /// Asks `fit` to stop, recording why (a signal number, e.g. 2 for SIGINT).
    pub fn request(&self, signal: i32) {
        self.0.store(signal, Ordering::SeqCst);
    }

    /// The requested signal, if any.
    pub fn requested(&self) -> Option<i32> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }

    /// The shared flag, for `signal_hook::flag::register_conditional_*`-style handlers.
    pub fn flag(&self) -> Arc<AtomicI32> {
        Arc::clone(&self.0)
    }
}
