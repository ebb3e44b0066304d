//! Writes TensorBoard event files with known values, for `tests/interop/tensorboard_interop.py`
//! (which reads them with the real `tensorboard` package).
//!
//! ```text
//! tb_write <log_dir> first    # epochs 0..3, 4 batches each (global batches 1..=12)
//! tb_write <log_dir> resume   # a new process resuming at epoch 3 after 12 batches: epochs 3..5
//! ```
//!
//! Each phase drives kiln's `TensorBoard` callback (update_freq = 2, histogram_freq = 1,
//! steps per second) and a `LearningRateScheduler` through a `ManualContext`, as `fit` would,
//! with these values (e = epoch, b = batch in epoch, g = global batch, 1-based):
//! * batch logs: `loss = e + b / 8`;
//! * epoch logs: `loss = 1 / (e + 1)`, `accuracy = e / 10`, `samples_per_second = 1000 + e`,
//!   `input_wait_seconds = e / 2`, `val_loss = 2 / (e + 1)`, `val_accuracy = e / 20`;
//! * learning rate: `ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5, staircase=True)` per
//!   epoch, i.e. `0.1 * 0.5^e`;
//! * weights: `tb_write/dense/kernel = [1, 2, 2, 3, 10 + e]`, `tb_write/dense/bias = [4, 4]`.

use std::path::PathBuf;

use kiln::callbacks::{LearningRateScheduler, Schedule, ScheduleUnit, TensorBoard, UpdateFreq};
use kiln::fit::{Callback, FitContext, Logs, ManualContext};

const BATCHES: u64 = 4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (log_dir, phase) = match args.as_slice() {
        [_, dir, phase] if phase == "first" || phase == "resume" => {
            (PathBuf::from(dir), phase.as_str())
        }
        _ => return Err("usage: tb_write <log_dir> first|resume".into()),
    };
    let (epochs, iterations) = if phase == "first" {
        (0..3, 0)
    } else {
        (3..5, 3 * BATCHES)
    };
    let mut ctx = ManualContext {
        iterations,
        ..ManualContext::new(0.1)
    };
    let mut scheduler = LearningRateScheduler::from_schedule(
        Schedule::ExponentialDecay {
            initial_learning_rate: 0.1,
            decay_steps: 1,
            decay_rate: 0.5,
            staircase: true,
        },
        ScheduleUnit::Epoch,
    )?;
    let mut tb = TensorBoard::new(&log_dir)
        .update_freq(UpdateFreq::Batches(2))
        .histogram_freq(1)
        .write_steps_per_second(true);
    // In `fit`'s order: the scheduler sets the rate before TensorBoard records it.
    let mut callbacks: [&mut dyn Callback; 2] = [&mut scheduler, &mut tb];
    for cb in callbacks.iter_mut() {
        cb.on_train_begin(&mut ctx)?;
    }
    let mut last = Logs::default();
    for epoch in epochs.clone() {
        let e = epoch as f64;
        ctx.weights = vec![
            (
                "tb_write/dense/kernel".into(),
                vec![1.0, 2.0, 2.0, 3.0, 10.0 + e as f32],
            ),
            ("tb_write/dense/bias".into(), vec![4.0, 4.0]),
        ];
        for cb in callbacks.iter_mut() {
            cb.on_epoch_begin(epoch, epochs.end, Some(BATCHES), &mut ctx)?;
        }
        for b in 0..BATCHES {
            for cb in callbacks.iter_mut() {
                cb.on_train_batch_begin(b, &mut ctx)?;
            }
            ctx.iterations += 1;
            let mut logs = Logs::default();
            logs.set("loss", e + b as f64 / 8.0);
            for cb in callbacks.iter_mut() {
                cb.on_train_batch_end(b, &logs, &mut ctx)?;
            }
        }
        let mut logs = Logs::default();
        logs.set("loss", 1.0 / (e + 1.0));
        logs.set("accuracy", e / 10.0);
        logs.set("samples_per_second", 1000.0 + e);
        logs.set("input_wait_seconds", e / 2.0);
        logs.set("val_loss", 2.0 / (e + 1.0));
        logs.set("val_accuracy", e / 20.0);
        for cb in callbacks.iter_mut() {
            cb.on_epoch_end(epoch, &mut logs, &mut ctx)?;
        }
        last = logs;
    }
    for cb in callbacks.iter_mut() {
        cb.on_train_end(&last, &mut ctx)?;
    }
    println!(
        "wrote epochs {:?} (batches {}..={}) to {}; learning rate now {}",
        epochs,
        iterations + 1,
        ctx.iterations(),
        log_dir.display(),
        ctx.learning_rate()
    );
    Ok(())
}
