//! Your own training step: Keras' `train_step` / `test_step` overrides, in Rust.
//!
//! A [`TrainStep`] gets the model's [`Parts`] (the compiled model itself, named `"main"`, and
//! the extra networks declared with [`crate::fit::Model::add_part`] or a config's
//! `[parts.<name>]` tables, each with its own optimizer) and a batch; it computes its losses,
//! applies its updates ([`Parts::apply_gradients`]) and returns its logs ([`StepLogs`], device
//! scalars). Everything else is `fit`'s as usual: the epoch iterator, callbacks, progress,
//! TensorBoard, BackupAndRestore checkpoints (every part and its optimizer state, so a run
//! resumed after a kill continues bit for bit), the NaN policy and stop requests.
//!
//! The logs must hold `loss` (the value `fit` watches for NaN / Inf and that callbacks such
//! as EarlyStopping monitor); each value is averaged over the epoch's examples, as the
//! built-in loss is. A step registered by name ([`register_train_step`]) can be chosen by a
//! config: `compile.train_step = "<name>"`.
//!
//! Example: a DCGAN (`examples/custom-train-step/`, `docs/custom-train-step.md`).

mod logs;
mod parts;

pub use logs::{RESERVED_LOGS, StepLogs};
pub use parts::{CrossReplica, Part, PartSpec, Parts, draw_seed};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::batch::DeviceBatch;
use crate::error::{KilnError, Result};

/// What a step knows of the run around it.
#[derive(Debug, Clone, Copy)]
pub struct StepContext {
    /// The epoch running (0-based).
    pub epoch: usize,
    /// The epoch's step (0-based).
    pub step: u64,
    /// Optimizer updates of the main part so far (Keras' `optimizer.iterations`).
    pub iterations: u64,
}

/// Keras' `train_step` / `test_step`: one step of training, one of evaluation.
///
/// Steps run with the backend's random generator seeded from the run's seed and the step
/// count, so random tensors drawn inside a step (a GAN's noise, a VAE's sampling) repeat on a
/// resumed run.
pub trait TrainStep: Send + Sync {
    /// The step's name, used in errors (`kiln train` names it in `compile.train_step`).
    fn name(&self) -> &str;

    /// The parts the step uses besides `main`; `fit` checks that the model has them before
    /// the first step. Default: none.
    fn required_parts(&self) -> Vec<&str> {
        Vec::new()
    }

    /// One training step on `batch`: forward passes ([`Part::call`]), losses, updates
    /// ([`Parts::apply_gradients`]). Returns the logs, which must hold `loss`; an `Err` stops
    /// `fit` with the message, naming the step.
    fn train_step(
        &self,
        parts: &mut Parts,
        batch: DeviceBatch,
        ctx: &StepContext,
    ) -> std::result::Result<StepLogs, String>;

    /// One evaluation step (validation data and `evaluate`), in inference mode. `None`
    /// (the default): the main part is evaluated with its compiled loss and metrics, as Keras'
    /// default `test_step` does.
    fn test_step(
        &self,
        parts: &mut Parts,
        batch: &DeviceBatch,
    ) -> Option<std::result::Result<StepLogs, String>> {
        let _ = (parts, batch);
        None
    }
}

/// `step.train_step(parts, batch, ctx)`, a panic in the step's code turned into an error
/// message (the parts stay usable).
pub fn run_guarded(
    step: &dyn TrainStep,
    parts: &mut Parts,
    batch: DeviceBatch,
    ctx: &StepContext,
) -> std::result::Result<StepLogs, String> {
    let run = std::panic::AssertUnwindSafe(|| step.train_step(parts, batch, ctx));
    std::panic::catch_unwind(run).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(format!("panicked: {what}"))
    })
}

type Factory = fn() -> Arc<dyn TrainStep>;

static REGISTERED: Mutex<BTreeMap<String, Factory>> = Mutex::new(BTreeMap::new());

/// Registers a train step under `name` for every config read afterwards in this process
/// (`compile.train_step = "<name>"`).
///
/// # Errors
/// [`KilnError::Config`] when a step is already registered under `name`.
pub fn register_train_step(name: &str, factory: Factory) -> Result<()> {
    let mut all = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    if all.contains_key(name) {
        return Err(KilnError::config(
            "compile.train_step",
            format!("a train step named \"{name}\" is already registered"),
        ));
    }
    all.insert(name.to_string(), factory);
    Ok(())
}

/// The train step registered under `name`.
///
/// # Errors
/// [`KilnError::Config`] on `compile.train_step` listing the registered names.
pub fn train_step_named(name: &str) -> Result<Arc<dyn TrainStep>> {
    let all = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    match all.get(name) {
        Some(factory) => Ok(factory()),
        None => {
            let known: Vec<&str> = all.keys().map(String::as_str).collect();
            let known = match known.is_empty() {
                true => "none (the plain `kiln` binary has no custom steps)".to_string(),
                false => known.join(", "),
            };
            Err(KilnError::config(
                "compile.train_step",
                format!(
                    "no train step named \"{name}\" in this binary; registered: {known}. A \
                     train step is Rust code: a binary registers it with \
                     kiln::step::custom::register_train_step (docs/custom-train-step.md)"
                ),
            ))
        }
    }
}
