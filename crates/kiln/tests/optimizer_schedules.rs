//! Optimizers with state and scheduled learning rates through `Model::fit` and its checkpoints:
//! a run resumed from a checkpoint continues bit for bit as the uninterrupted run (the
//! optimizer's variables are in the checkpoint, and the schedule continues from the restored
//! step count), every step's rate is the schedule at Keras' `optimizer.iterations`, and a
//! callback that sets the rate of a scheduled optimizer stops `fit` with a config error.

mod common;

use burn::prelude::Device;
use kiln::Model;
use kiln::checkpoint::CheckpointDir;
use kiln::compile::{Compiled, LossKind, LossSpec, OptimizerSpec, Schedule};
use kiln::fit::{Backup, Callback, FitContext, FitOptions, SaveFreq};
use kiln_data::{Array, Buffer, Dataset, Element};

/// 96 points of two classes split by a line, batches of 16: 6 batches an epoch.
fn line_data() -> Dataset {
    let mut x = Vec::new();
    let mut y = Vec::new();
    for i in 0..96 {
        let (a, b) = ((i % 12) as f32 / 6.0 - 1.0, (i / 12) as f32 / 4.0 - 1.0);
        x.extend([a, b]);
        y.push(i64::from(a + 0.5 * b > 0.1));
    }
    let x = Array::new(vec![96, 2], Buffer::F32(x)).unwrap();
    let y = Array::new(vec![96], Buffer::I64(y)).unwrap();
    Dataset::from_tensor_slices(Element::new().with("x", x).with("y", y))
        .unwrap()
        .batch(16, false)
}

fn model(optimizer: &str) -> Model {
    let spec = common::two_layer_spec(8, 2);
    let optimizer: toml::Table = toml::from_str(&format!("o = {optimizer}")).unwrap();
    let compiled = Compiled::new(
        &spec,
        OptimizerSpec::from_toml(&optimizer["o"]).unwrap(),
        LossSpec {
            kind: LossKind::SparseCategoricalCrossentropy,
            from_logits: true,
        },
        &[],
    )
    .unwrap();
    Model::new("schedules", spec, compiled, 7, Device::flex())
}

fn options(epochs: usize, dir: &CheckpointDir, resume: bool) -> FitOptions {
    FitOptions {
        backup: Some(Backup {
            dir: dir.clone(),
            save_freq: SaveFreq::Epoch,
            resume: resume.then(|| dir.latest().unwrap().0).flatten(),
            config: String::new(),
            data_fingerprints: Default::default(),
        }),
        ..FitOptions::epochs(epochs)
    }
}

/// Records the rate each step uses (Keras' `optimizer.learning_rate` before the step) with the
/// step count.
#[derive(Default)]
struct Rates(Vec<(u64, f64)>);

impl Callback for Rates {
    fn on_train_batch_begin(&mut self, _step: u64, ctx: &mut dyn FitContext) -> kiln::Result<()> {
        self.0.push((ctx.iterations(), ctx.learning_rate()));
        Ok(())
    }
}

fn weights(m: &Model) -> Vec<Vec<f32>> {
    kiln::model::weights::keras_weights(m.spec(), m.network())
        .into_iter()
        .map(|(_, _, v)| v)
        .collect()
}

const SCHEDULE: &str = "{ type = \"PolynomialDecay\", initial_learning_rate = 0.05, \
                        decay_steps = 10, end_learning_rate = 0.005, power = 2.0 }";

/// Two epochs in one go against one epoch, then a new model resumed for the second: the same
/// weights and the same rate at every step, for optimizers whose state matters.
#[test]
fn a_resumed_run_continues_the_optimizer_state_and_the_schedule() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, optimizer) in [
        format!(
            "{{ type = \"RMSprop\", momentum = 0.9, centered = true, learning_rate = {SCHEDULE} }}"
        ),
        format!("{{ type = \"Nadam\", learning_rate = {SCHEDULE} }}"),
        format!("{{ type = \"Adam\", amsgrad = true, learning_rate = {SCHEDULE} }}"),
        "{ type = \"Adadelta\", learning_rate = 1.0 }".to_string(),
    ]
    .iter()
    .enumerate()
    {
        let whole = CheckpointDir::new(tmp.path().join(format!("whole{i}")), 3);
        let (mut a, mut rates_a) = (model(optimizer), Rates::default());
        a.fit_with(
            &line_data(),
            None,
            &options(2, &whole, false),
            &mut [&mut rates_a],
        )
        .unwrap();

        let split = CheckpointDir::new(tmp.path().join(format!("split{i}")), 3);
        let mut b = model(optimizer);
        b.fit_with(&line_data(), None, &options(1, &split, false), &mut [])
            .unwrap();
        let (mut c, mut rates_c) = (model(optimizer), Rates::default());
        c.fit_with(
            &line_data(),
            None,
            &options(2, &split, true),
            &mut [&mut rates_c],
        )
        .unwrap();
        assert_eq!(
            weights(&c),
            weights(&a),
            "{optimizer}: resume changed the weights"
        );
        assert_eq!(
            rates_c.0,
            rates_a.0[6..],
            "{optimizer}: resume changed the rates"
        );

        // The same weights without the optimizer's state (and step count) train otherwise.
        let path = tmp.path().join(format!("weights{i}.safetensors"));
        b.save_weights(&path).unwrap();
        let spec = b.spec().clone();
        let compiled = b.compiled().clone();
        let mut d = Model::from_weights("d", spec, compiled, &path, Device::flex()).unwrap();
        d.fit(&line_data(), None, 1, &mut []).unwrap();
        assert_ne!(weights(&d), weights(&a), "{optimizer}");
    }
}

/// Every step's rate is the schedule at the number of steps applied before it; the epoch logs'
/// `learning_rate` (TensorBoard's `epoch_learning_rate`) is the next step's.
#[test]
fn each_step_uses_the_schedule_at_the_step_count() {
    let mut m = model(&format!("{{ type = \"SGD\", learning_rate = {SCHEDULE} }}"));
    let mut rates = Rates::default();
    m.fit(&line_data(), None, 3, &mut [&mut rates]).unwrap();
    let schedule = m.compiled().optimizer.schedule().unwrap().clone();
    assert!(matches!(schedule, Schedule::PolynomialDecay { .. }));
    let steps: Vec<u64> = rates.0.iter().map(|(s, _)| *s).collect();
    assert_eq!(steps, (0..18).collect::<Vec<u64>>());
    for (step, rate) in rates.0 {
        // (0.05 - 0.005) (1 - min(s, 10) / 10)² + 0.005
        let s = step.min(10) as f64 / 10.0;
        assert!(
            (rate - (0.045 * (1.0 - s).powi(2) + 0.005)).abs() < 1e-15,
            "{step}: {rate}"
        );
    }
}

/// Sets the rate at the second epoch's begin, as `LearningRateScheduler` does.
struct SetsRate;

impl Callback for SetsRate {
    fn on_epoch_begin(
        &mut self,
        epoch: usize,
        _epochs: usize,
        _steps: Option<u64>,
        ctx: &mut dyn FitContext,
    ) -> kiln::Result<()> {
        if epoch == 1 {
            ctx.set_learning_rate(0.5);
        }
        Ok(())
    }
}

#[test]
fn setting_the_rate_of_a_scheduled_optimizer_is_a_config_error() {
    let mut m = model(&format!(
        "{{ type = \"Lion\", learning_rate = {SCHEDULE} }}"
    ));
    let e = m
        .fit(&line_data(), None, 3, &mut [&mut SetsRate])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("compile.optimizer.learning_rate") && e.contains("cannot be set"),
        "{e}"
    );
    // A constant rate can be set.
    let mut m = model("{ type = \"Lion\", learning_rate = 0.001 }");
    m.fit(&line_data(), None, 2, &mut [&mut SetsRate]).unwrap();
}
