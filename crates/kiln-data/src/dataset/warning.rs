//! Warnings from running pipelines (e.g. a cache discarded because an iteration stopped early).
//!
//! They are not errors — the pipeline carries on — so they do not travel as `Err` items. By
//! default each is printed to standard error as `kiln-data warning: <message>`; a program with
//! its own log or progress display installs a hook with [`set_warning_hook`].

use std::sync::{Arc, RwLock};

/// A function receiving every warning's text (called on whatever thread raised it).
pub type WarningHook = Arc<dyn Fn(&str) + Send + Sync>;

static HOOK: RwLock<Option<WarningHook>> = RwLock::new(None);

/// Routes kiln-data's pipeline warnings to `hook` (process-wide), or back to standard error
/// with `None`.
pub fn set_warning_hook(hook: Option<WarningHook>) {
    *HOOK.write().unwrap_or_else(|p| p.into_inner()) = hook;
}

/// Reports a warning through the hook, or on standard error.
pub(crate) fn warn(message: &str) {
    let hook = HOOK.read().unwrap_or_else(|p| p.into_inner()).clone();
    match hook {
        Some(hook) => hook(message),
        None => eprintln!("kiln-data warning: {message}"),
    }
}
