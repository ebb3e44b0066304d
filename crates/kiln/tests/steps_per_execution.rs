//! Keras' `steps_per_execution`: the loss and outputs of `N` steps stay on the device and are
//! read back in one go. The weights and logs are those of reading after every step (same
//! batches, same dropout seeds, the metrics added in the same order); batch-level callbacks run
//! once per `N` steps; the profile counts one host read per window; a non-finite loss is still
//! handled at the step it happened.

mod common;

use std::cell::RefCell;

use burn::prelude::Device;
use kiln::fit::{FitContext, FitOptions, OnNan};
use kiln::model::weights::keras_weights;
use kiln::{Callback, History, Logs, Model};
use kiln_data::{Array, Buffer, Dataset, Element};

/// 64 points of a 2-class problem in 2-D, in batches of 16 (4 steps an epoch); with `poison`,
/// the third batch's features are 3e38, whose logits overflow to a non-finite loss.
fn data(poison: bool) -> Dataset {
    let mut x: Vec<f32> = (0..128)
        .map(|i| ((i * 37) % 17) as f32 / 8.0 - 1.0)
        .collect();
    let y: Vec<i64> = (0..64)
        .map(|i| i64::from(x[2 * i] + x[2 * i + 1] > 0.0))
        .collect();
    if poison {
        x[64..96].iter_mut().for_each(|v| *v = 3e38);
    }
    let el = Element::new()
        .with("x", Array::new(vec![64, 2], Buffer::F32(x)).unwrap())
        .with("y", Array::new(vec![64], Buffer::I64(y)).unwrap());
    Dataset::from_tensor_slices(el).unwrap().batch(16, false)
}

fn model(steps_per_execution: u64) -> Model {
    let (spec, compiled) = common::two_layer_compiled(8, 2);
    let compiled = compiled
        .with_steps_per_execution(steps_per_execution)
        .unwrap();
    let mut m = Model::new("spe", spec, compiled, 7, Device::flex());
    m.set_profiling(true);
    m
}

fn weights(m: &Model) -> Vec<Vec<f32>> {
    keras_weights(m.spec(), m.network())
        .into_iter()
        .map(|(_, _, v)| v)
        .collect()
}

/// The batch indices each hook was called with.
#[derive(Default)]
struct Hooks {
    begin: RefCell<Vec<u64>>,
    end: RefCell<Vec<u64>>,
}

impl Callback for &Hooks {
    fn on_train_batch_begin(&mut self, step: u64, _: &mut dyn FitContext) -> kiln::Result<()> {
        self.begin.borrow_mut().push(step);
        Ok(())
    }

    fn on_train_batch_end(
        &mut self,
        step: u64,
        _: &Logs,
        _: &mut dyn FitContext,
    ) -> kiln::Result<()> {
        self.end.borrow_mut().push(step);
        Ok(())
    }
}

fn train(steps_per_execution: u64, on_nan: OnNan, poison: bool) -> (Model, History, Hooks) {
    let mut m = model(steps_per_execution);
    let hooks = Hooks::default();
    let opts = FitOptions {
        on_nan,
        ..FitOptions::epochs(2)
    };
    let history = m
        .fit_with(&data(poison), None, &opts, &mut [&mut &hooks])
        .unwrap();
    (m, history, hooks)
}

/// The logs that do not measure time.
fn values(h: &History) -> Vec<(String, Vec<f64>)> {
    let timed = ["samples_per_second", "input_wait_seconds"];
    h.history
        .iter()
        .filter(|(k, _)| !timed.iter().any(|t| k.contains(t)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[test]
fn three_steps_per_read_give_the_weights_and_logs_of_one() {
    for on_nan in [OnNan::Stop, OnNan::Continue] {
        let (one, h1, _) = train(1, on_nan, false);
        let (three, h3, _) = train(3, on_nan, false);
        assert_eq!(weights(&one), weights(&three), "{on_nan:?}");
        assert_eq!(values(&h1), values(&h3), "{on_nan:?}");
        assert!(h1.last("loss").unwrap().is_finite());
        assert_eq!(h3.history["accuracy"].len(), 2);
    }
}

#[test]
fn batch_hooks_run_once_per_window_as_in_keras() {
    let (_, _, hooks) = train(3, OnNan::Stop, false);
    // Per epoch: steps [0, 3) then the epoch's last step on its own.
    assert_eq!(*hooks.begin.borrow(), vec![0, 3, 0, 3]);
    assert_eq!(*hooks.end.borrow(), vec![2, 3, 2, 3]);
    let (_, _, hooks) = train(1, OnNan::Stop, false);
    assert_eq!(*hooks.end.borrow(), vec![0, 1, 2, 3, 0, 1, 2, 3]);
}

#[test]
fn the_profile_counts_one_host_read_per_window() {
    let (_, h3, _) = train(3, OnNan::Stop, false);
    let p = h3.profile.unwrap();
    assert_eq!((p.steps, p.host_reads), (4, 2));
    assert!(
        p.table()
            .contains("host reads of the loss and outputs: 2 over 4 steps")
    );
    let (_, h1, _) = train(1, OnNan::Stop, false);
    let p = h1.profile.unwrap();
    assert_eq!((p.steps, p.host_reads), (4, 4));
    // Without a guarding NaN policy, nothing is kept for a rerun and the count is the same.
    let (_, hc, _) = train(4, OnNan::Continue, false);
    let p = hc.profile.unwrap();
    assert_eq!((p.steps, p.host_reads), (4, 1));
}

#[test]
fn a_non_finite_loss_inside_a_window_is_skipped_at_its_own_step() {
    // The poisoned batch is step 2, inside the window [0, 3): the window runs again from its
    // start one step at a time and skip_step drops exactly that batch.
    let (one, h1, _) = train(1, OnNan::SkipStep, true);
    let (three, h3, _) = train(3, OnNan::SkipStep, true);
    assert_eq!(h1.history["skipped_nan_steps"], vec![1.0, 1.0]);
    assert_eq!(values(&h1), values(&h3));
    assert_eq!(weights(&one), weights(&three));
    assert!(weights(&three).iter().flatten().all(|v| v.is_finite()));
}

#[test]
fn a_non_finite_loss_inside_a_window_stops_at_its_own_step() {
    let mut ends = Vec::new();
    for n in [1, 3] {
        let mut m = model(n);
        let opts = FitOptions {
            report_dir: Some(std::env::temp_dir().join(format!("kiln-spe-nan-{n}"))),
            ..FitOptions::epochs(1)
        };
        let err = m.fit_with(&data(true), None, &opts, &mut []).unwrap_err();
        let text = err.to_string();
        // The optimizer's step counter has counted the failed batch (as with one step a read).
        assert!(
            text.contains("NaN or infinite at epoch 1, batch 2 (step 3 of the run)"),
            "{n}: {text}"
        );
        ends.push(weights(&m));
    }
    // The weights after steps 0 and 1, the same both ways.
    assert!(ends[0].iter().flatten().all(|v| v.is_finite()));
    assert_eq!(ends[0], ends[1]);
}

#[test]
fn zero_steps_per_execution_is_refused() {
    let (_, compiled) = common::two_layer_compiled(8, 2);
    let err = compiled
        .with_steps_per_execution(0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("compile.steps_per_execution"), "{err}");
}
