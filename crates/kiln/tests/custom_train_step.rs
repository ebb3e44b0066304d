//! Custom train steps (Keras' `train_step` override): a step written by hand that does what
//! the compiled step does trains the same weights; extra parts are checkpointed and resumed
//! exactly; bad logs and non-finite losses give errors naming the step and the key; the NaN
//! policy undoes a skipped step's updates; `test_step` drives `evaluate`.

mod common;

use std::sync::Arc;

use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation::log_softmax;
use kiln::KilnError;
use kiln::batch::DeviceBatch;
use kiln::checkpoint::CheckpointDir;
use kiln::compile::{Compiled, GradientOptions, Labels, LossKind, LossSpec};
use kiln::distribute::{MirroredStrategy, Strategy};
use kiln::fit::{Backup, FitOptions, OnNan, SaveFreq};
use kiln::model::weights::keras_weights;
use kiln::model::{Act, ModelSpec, Network};
use kiln::step::custom::{PartSpec, Parts, StepContext, StepLogs, TrainStep};
use kiln::{History, Model};

/// Held by every test of this file: the backend's random generator is one per process and
/// the tests run in threads of one process, so a test that checks draws (or trains with
/// noise twice to compare) must not share it with another test's initializers meanwhile.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static DRAWS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    DRAWS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The two-layer classifier of `common`, compiled without metrics (a custom step logs its
/// own).
fn model() -> Model {
    let spec = common::two_layer_spec(8, 2);
    let loss = LossSpec {
        kind: LossKind::SparseCategoricalCrossentropy,
        from_logits: true,
    };
    let compiled = Compiled::new(&spec, common::adam(0.01), loss, &[]).unwrap();
    Model::new("custom", spec, compiled, 7, Device::flex())
}

fn weights(spec: &ModelSpec, net: &Network) -> Vec<Vec<f32>> {
    keras_weights(spec, net)
        .into_iter()
        .map(|(_, _, v)| v)
        .collect()
}

/// Sparse categorical cross-entropy from logits, written out: `-mean(log_softmax(z)[y])`.
fn cross_entropy(logits: Tensor<2>, batch: &DeviceBatch) -> Tensor<1> {
    let Some(Labels::Sparse(y)) = &batch.labels else {
        panic!("sparse labels expected");
    };
    let classes = logits.dims()[1];
    let one_hot = y.clone().one_hot(classes).float();
    (log_softmax(logits, 1) * one_hot).sum_dim(1).mean().neg()
}

/// What a step does, for the tests.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// The compiled step by hand: cross-entropy, one update of `main`.
    Plain,
    /// As `Plain`, and the part `twin` trained on the same loss of its own.
    WithTwin,
    /// As `Plain`, but at update 1 the logs say the loss is NaN.
    NanAtOne,
    /// As `Plain`, but at update 1 nothing is applied and the loss is 0.
    NothingAtOne,
    /// Bad logs.
    NoLoss,
    Twice,
    Reserved,
    Wide,
    Fails,
    WrongInput,
    Panics,
    /// As `Plain` with a second log `copy`, and a NaN loss from update 4 (epoch 2) on.
    NanFromFour,
    /// As `Plain` on inputs with Gaussian noise drawn in the step.
    Noisy,
    /// As `Plain`, but a batch of fewer than 6 examples is not applied (replicas disagree).
    SmallSkips,
}

struct Step(Mode);

impl TrainStep for Step {
    fn name(&self) -> &str {
        "by-hand"
    }

    fn train_step(
        &self,
        parts: &mut Parts,
        batch: DeviceBatch,
        ctx: &StepContext,
    ) -> Result<StepLogs, String> {
        let at_one = ctx.iterations == 1;
        if self.0 == Mode::NothingAtOne && at_one {
            return Ok(StepLogs::new().with("loss", Tensor::zeros([1], &Device::flex())));
        }
        if self.0 == Mode::WrongInput {
            parts
                .main()
                .call(Act::Flat(Tensor::zeros([4, 3], &Device::flex())), true)?;
        }
        if self.0 == Mode::Panics {
            panic!("index out of bounds in the user's step");
        }
        let x = match self.0 {
            Mode::Noisy => {
                let flat = batch.x.clone().into_flat();
                let noise =
                    Tensor::random(flat.shape(), Distribution::Normal(0.0, 0.3), &flat.device());
                Act::Flat(flat + noise)
            }
            _ => batch.x.clone(),
        };
        let logits = parts.main().call(x, true)?.into_flat();
        let loss = cross_entropy(logits, &batch);
        if self.0 != Mode::SmallSkips || batch.size >= 6 {
            parts.apply_gradients(loss.clone(), &["main"])?;
        }
        let logs = StepLogs::new();
        Ok(match self.0 {
            Mode::WithTwin => {
                let twin = parts.get("twin")?.call(batch.x.clone(), true)?.into_flat();
                let twin_loss = cross_entropy(twin, &batch);
                parts.apply_gradients(twin_loss.clone(), &["twin"])?;
                let rows = Tensor::from_floats([batch.size as f32], &loss.device());
                logs.with("loss", loss)
                    .with("twin_loss", twin_loss)
                    .with("rows", rows)
            }
            Mode::NanAtOne if at_one => logs.with("loss", loss * f32::NAN),
            Mode::NanFromFour if ctx.iterations >= 4 => logs
                .with("loss", loss.clone() * f32::NAN)
                .with("copy", loss),
            Mode::NanFromFour => logs.with("loss", loss.clone()).with("copy", loss),
            Mode::NoLoss => logs.with("main_loss", loss),
            Mode::Twice => logs.with("loss", loss.clone()).with("loss", loss),
            Mode::Reserved => logs.with("loss", loss.clone()).with("val_loss", loss),
            Mode::Wide => logs.with("loss", Tensor::cat(vec![loss.clone(), loss], 0)),
            Mode::Fails => return Err("the discriminator is missing".into()),
            _ => logs.with("loss", loss),
        })
    }

    fn test_step(
        &self,
        parts: &mut Parts,
        batch: &DeviceBatch,
    ) -> Option<Result<StepLogs, String>> {
        let logits = match parts.main().call(batch.x.clone(), false) {
            Ok(out) => out.into_flat(),
            Err(e) => return Some(Err(e)),
        };
        let loss = cross_entropy(logits, batch);
        Some(Ok(StepLogs::new()
            .with("loss", loss.clone())
            .with("doubled", loss * 2.0)))
    }
}

fn with_step(mode: Mode) -> Model {
    let mut m = model();
    m.set_train_step(Arc::new(Step(mode)));
    m
}

fn fit(m: &mut Model, epochs: usize, on_nan: OnNan) -> kiln::Result<History> {
    let opts = FitOptions {
        on_nan,
        ..FitOptions::epochs(epochs)
    };
    m.fit_with(&common::two_class_points(), None, &opts, &mut [])
}

fn close(a: &[Vec<f32>], b: &[Vec<f32>], tol: f32) {
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        assert!((x - y).abs() <= tol * y.abs().max(1.0), "{x} vs {y}");
    }
}

#[test]
fn a_step_written_by_hand_trains_the_weights_of_the_compiled_step() {
    let _alone = alone();
    let mut compiled = model();
    let want = fit(&mut compiled, 3, OnNan::Stop).unwrap();
    let mut custom = with_step(Mode::Plain);
    let got = fit(&mut custom, 3, OnNan::Stop).unwrap();
    let (w, g) = (
        weights(compiled.spec(), compiled.network()),
        weights(custom.spec(), custom.network()),
    );
    close(&g, &w, 1e-5);
    assert_ne!(g, weights(model().spec(), model().network()), "trained");
    let (l, k) = (&want.history["loss"], &got.history["loss"]);
    assert_eq!(l.len(), 3);
    for (a, b) in l.iter().zip(k) {
        assert!((a - b).abs() < 1e-6, "losses {l:?} vs {k:?}");
    }
    assert!(k[2] < k[0], "the loss falls: {k:?}");
}

#[test]
fn test_step_drives_evaluate_and_keeps_its_own_logs() {
    let _alone = alone();
    let mut m = with_step(Mode::Plain);
    fit(&mut m, 1, OnNan::Stop).unwrap();
    let logs = m.evaluate(&common::two_class_points()).unwrap();
    let mut plain = model();
    fit(&mut plain, 1, OnNan::Stop).unwrap();
    let want = plain
        .evaluate(&common::two_class_points())
        .unwrap()
        .get("loss")
        .unwrap();
    let loss = logs.get("loss").unwrap();
    assert!((loss - want).abs() < 1e-5, "{loss} vs {want}");
    let doubled = logs.get("doubled").unwrap();
    assert!(
        (doubled - 2.0 * loss).abs() < 1e-5,
        "{doubled} vs 2 x {loss}"
    );
}

/// A model with the part `twin` (the same layers, its own weights and optimizer).
fn with_twin() -> Model {
    let mut m = with_step(Mode::WithTwin);
    let twin = PartSpec {
        name: "twin".into(),
        model: common::two_layer_spec(4, 2),
        optimizer: common::adam(0.01),
        gradients: GradientOptions::default(),
    };
    m.add_part(twin).unwrap();
    m
}

fn part_weights(m: &Model) -> Vec<Vec<f32>> {
    let p = m.part("twin").unwrap();
    weights(p.spec(), p.network())
}

#[test]
fn parts_are_trained_checkpointed_and_resumed_exactly() {
    let _alone = alone();
    resumed_exactly(1);
    resumed_exactly(2);
}

/// [`parts_are_trained_checkpointed_and_resumed_exactly`] with `replicas` mirrored replicas.
fn resumed_exactly(replicas: usize) {
    let root = std::env::temp_dir().join(format!(
        "kiln-custom-step-{}-{replicas}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&root);
    let backup = |dir: &str, resume: bool| {
        let dir = CheckpointDir::new(root.join(dir), 3);
        let resume = resume.then(|| dir.latest().unwrap().0.unwrap());
        Backup {
            dir,
            save_freq: SaveFreq::Epoch,
            resume,
            config: String::new(),
            data_fingerprints: Default::default(),
        }
    };
    let run = |epochs: usize, backup: Backup| {
        let mut m = with_twin();
        mirrored(&mut m, replicas);
        let opts = FitOptions {
            backup: Some(backup),
            ..FitOptions::epochs(epochs)
        };
        let h = m
            .fit_with(&common::two_class_points(), None, &opts, &mut [])
            .unwrap();
        (m, h)
    };
    let (straight, h) = run(3, backup("straight", false));
    assert_ne!(
        part_weights(&straight),
        part_weights(&with_twin()),
        "trained"
    );
    let twin_loss = &h.history["twin_loss"];
    assert!(twin_loss[2] < twin_loss[0], "{twin_loss:?}");
    run(1, backup("resumed", false));
    let (resumed, h2) = run(3, backup("resumed", true));
    assert_eq!(part_weights(&resumed), part_weights(&straight));
    let main = |m: &Model| weights(m.spec(), m.network());
    assert_eq!(main(&resumed), main(&straight));
    assert_eq!(h2.history["twin_loss"], h.history["twin_loss"]);
    let ckpt = std::fs::read_dir(root.join("resumed")).unwrap().count();
    assert!(ckpt >= 1);
    std::fs::remove_dir_all(&root).unwrap();
}

/// The error `fit` stops with for a step in `mode`.
fn error(mode: Mode, on_nan: OnNan) -> String {
    let mut m = with_step(mode);
    match fit(&mut m, 1, on_nan) {
        Err(e @ KilnError::TrainStep { .. }) => e.to_string(),
        other => panic!("expected a train step error, got {other:?}"),
    }
}

#[test]
fn bad_logs_and_failures_name_the_step_and_the_key() {
    let _alone = alone();
    let cases = [
        (
            Mode::NoLoss,
            "train step \"by-hand\": loss: the step returned no `loss`",
        ),
        (Mode::Twice, "train step \"by-hand\": loss: returned twice"),
        (
            Mode::Reserved,
            "train step \"by-hand\": val_loss: is a name fit writes itself",
        ),
        (Mode::Wide, "train step \"by-hand\": loss: has 2 values"),
        (
            Mode::Fails,
            "train step \"by-hand\": step: the discriminator is missing",
        ),
        (
            Mode::WrongInput,
            "train step \"by-hand\": step: part \"main\" takes inputs of shape (None, 2), was \
             called on (None, 3)",
        ),
        (
            Mode::Panics,
            "train step \"by-hand\": step: panicked: index out of bounds in the user's step",
        ),
    ];
    for (mode, want) in cases {
        let got = error(mode, OnNan::Stop);
        assert!(got.starts_with(want), "{got}\nwanted: {want}");
    }
}

#[test]
fn a_nan_loss_stops_naming_the_step_or_is_skipped_with_its_updates_undone() {
    let _alone = alone();
    let stop = error(Mode::NanAtOne, OnNan::Stop);
    assert!(
        stop.starts_with("train step \"by-hand\": loss: is NaN at epoch 1, batch 1"),
        "{stop}"
    );
    let mut skipped = with_step(Mode::NanAtOne);
    let h = fit(&mut skipped, 2, OnNan::SkipStep).unwrap();
    assert_eq!(h.history["skipped_nan_steps"], vec![1.0]);
    let mut nothing = with_step(Mode::NothingAtOne);
    fit(&mut nothing, 2, OnNan::SkipStep).unwrap();
    let w = |m: &Model| weights(m.spec(), m.network());
    assert_eq!(w(&skipped), w(&nothing));
}

#[test]
fn settings_a_custom_step_cannot_use_are_refused_by_key() {
    let _alone = alone();
    let (spec, compiled) = common::two_layer_compiled(8, 2);
    let mut m = Model::new("metrics", spec, compiled, 7, Device::flex());
    m.set_train_step(Arc::new(Step(Mode::Plain)));
    let e = fit(&mut m, 1, OnNan::Stop).unwrap_err().to_string();
    assert!(
        e.starts_with("train step \"by-hand\": compile.metrics:"),
        "{e}"
    );
    let mut m = with_step(Mode::Plain);
    let main = PartSpec {
        name: "main".into(),
        model: common::two_layer_spec(4, 2),
        optimizer: common::adam(0.01),
        gradients: GradientOptions::default(),
    };
    let e = m.add_part(main).unwrap_err().to_string();
    assert!(e.starts_with("parts.main:"), "{e}");
}

/// A step with no `test_step` (Keras' default one applies).
struct TrainOnly;

impl TrainStep for TrainOnly {
    fn name(&self) -> &str {
        "train-only"
    }

    fn train_step(
        &self,
        p: &mut Parts,
        b: DeviceBatch,
        c: &StepContext,
    ) -> Result<StepLogs, String> {
        Step(Mode::Plain).train_step(p, b, c)
    }
}

#[test]
fn without_a_test_step_evaluate_needs_labels_for_the_compiled_loss() {
    let _alone = alone();
    let mut m = model();
    m.set_train_step(Arc::new(TrainOnly));
    let with_labels = m.evaluate(&common::two_class_points()).unwrap();
    assert!(with_labels.get("loss").unwrap().is_finite());
    let x = kiln_data::Array::new(vec![8, 2], kiln_data::Buffer::F32(vec![0.5; 16])).unwrap();
    let features = kiln_data::Element::new().with("x", x);
    let features = kiln_data::Dataset::from_tensor_slices(features)
        .unwrap()
        .batch(4, false);
    let e = m.evaluate(&features).unwrap_err().to_string();
    assert!(
        e.starts_with("train step \"train-only\": test_step: the step has no test_step"),
        "{e}"
    );
}

/// [`model`] under `mixed_float16`, with a loss scale that grows every 3 finite steps (so that
/// 3 epochs of 4 steps see it change).
fn float16(step: bool) -> Model {
    let spec = common::two_layer_spec(8, 2).with_precision(kiln::Precision::MixedFloat16);
    let loss = LossSpec {
        kind: LossKind::SparseCategoricalCrossentropy,
        from_logits: true,
    };
    let compiled = Compiled::new(&spec, common::adam(0.01), loss, &[])
        .unwrap()
        .with_loss_scale(Some(kiln::precision::LossScaleOptions {
            initial_scale: 32768.0,
            dynamic_growth_steps: 3,
        }))
        .unwrap();
    let mut m = Model::new("f16", spec, compiled, 7, Device::flex());
    if step {
        m.set_train_step(Arc::new(Step(Mode::Plain)));
    }
    m
}

#[test]
fn under_mixed_float16_a_step_by_hand_scales_its_loss_as_the_compiled_step() {
    let _alone = alone();
    let mut compiled = float16(false);
    let want = fit(&mut compiled, 3, OnNan::Stop).unwrap();
    let mut custom = float16(true);
    let got = fit(&mut custom, 3, OnNan::Stop).unwrap();
    // The same scale after every epoch: grown every 3 finite steps from 32768.
    let scale = &got.history["loss_scale"];
    assert_eq!(scale, &want.history["loss_scale"]);
    assert!(scale[2] > 32768.0, "{scale:?}");
    close(
        &weights(custom.spec(), custom.network()),
        &weights(compiled.spec(), compiled.network()),
        1e-3,
    );
}

/// `with_step(mode)` reading its logs back once every `n` steps (`steps_per_execution`), with
/// the step profile on.
fn every(mode: Mode, n: u64) -> Model {
    let spec = common::two_layer_spec(8, 2);
    let loss = LossSpec {
        kind: LossKind::SparseCategoricalCrossentropy,
        from_logits: true,
    };
    let compiled = Compiled::new(&spec, common::adam(0.01), loss, &[])
        .unwrap()
        .with_steps_per_execution(n)
        .unwrap();
    let mut m = Model::new("custom", spec, compiled, 7, Device::flex());
    m.set_train_step(Arc::new(Step(mode)));
    m.set_profiling(true);
    m
}

#[test]
fn deferred_reads_give_a_custom_step_the_weights_and_logs_of_reading_every_step() {
    let _alone = alone();
    let w = |m: &Model| weights(m.spec(), m.network());
    let (mut one, mut three) = (every(Mode::Plain, 1), every(Mode::Plain, 3));
    let h1 = fit(&mut one, 2, OnNan::Stop).unwrap();
    let h3 = fit(&mut three, 2, OnNan::Stop).unwrap();
    assert_eq!(w(&three), w(&one));
    assert_eq!(h3.history["loss"], h1.history["loss"]);
    // The last epoch's 4 steps: windows [0, 3) and [3], two reads instead of four.
    let (p1, p3) = (h1.profile.unwrap(), h3.profile.unwrap());
    assert_eq!((p1.steps, p1.host_reads), (4, 4));
    assert_eq!((p3.steps, p3.host_reads), (4, 2));
    // A NaN inside a window: the window runs again one step at a time, so the policy acts at
    // that step as with one read per step.
    let mut skipped = every(Mode::NanAtOne, 3);
    let h = fit(&mut skipped, 2, OnNan::SkipStep).unwrap();
    assert_eq!(h.history["skipped_nan_steps"], vec![1.0]);
    let mut nothing = every(Mode::NothingAtOne, 1);
    fit(&mut nothing, 2, OnNan::SkipStep).unwrap();
    assert_eq!(w(&skipped), w(&nothing));
    let mut stopped = every(Mode::NanAtOne, 3);
    let e = fit(&mut stopped, 1, OnNan::Stop).unwrap_err().to_string();
    assert!(
        e.starts_with("train step \"by-hand\": loss: is NaN at epoch 1, batch 1"),
        "{e}"
    );
}

#[test]
fn an_epoch_whose_steps_were_all_skipped_keeps_the_step_logs_in_the_history() {
    let _alone = alone();
    let mut m = with_step(Mode::NanFromFour);
    let h = fit(&mut m, 3, OnNan::SkipStep).unwrap();
    let (loss, copy) = (&h.history["loss"], &h.history["copy"]);
    assert_eq!(loss.len(), 3);
    assert_eq!(copy.len(), 3, "one value per epoch: {copy:?}");
    assert_eq!(copy[0], loss[0]);
    // Epochs 2 and 3 added no step: 0, as the loss is.
    assert_eq!(&copy[1..], &loss[1..]);
    assert_eq!(h.history["skipped_nan_steps"], vec![4.0, 4.0]);
}

fn mirrored(m: &mut Model, replicas: usize) {
    let s = MirroredStrategy::new(replicas).unwrap();
    m.set_strategy(Strategy::Mirrored(s));
}

#[test]
fn under_mirrored_each_replica_steps_on_its_share_and_the_sum_trains_the_one_device_weights() {
    let _alone = alone();
    let mut one = with_twin();
    let h1 = fit(&mut one, 3, OnNan::Stop).unwrap();
    // Batches of 16: two replicas of 8, three of 6, 6 and 4 (`split_sizes`, as TensorFlow).
    for (replicas, rows) in [(2, 8.0), (3, (36.0 + 36.0 + 16.0) / 16.0)] {
        let mut m = with_twin();
        mirrored(&mut m, replicas);
        let h = fit(&mut m, 3, OnNan::Stop).unwrap();
        close(
            &weights(m.spec(), m.network()),
            &weights(one.spec(), one.network()),
            1e-5,
        );
        close(&part_weights(&m), &part_weights(&one), 1e-5);
        for key in ["loss", "twin_loss"] {
            let (a, b) = (&h.history[key], &h1.history[key]);
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() < 1e-5, "{key}: {a:?} vs {b:?}");
            }
        }
        // The logs are the share-weighted sum of the replicas' (each saw its own rows).
        for r in &h.history["rows"] {
            assert!(
                (r - rows).abs() < 1e-5,
                "{replicas} replicas: {r} vs {rows}"
            );
        }
        assert_eq!(h1.history["rows"], vec![16.0; 3]);
    }
}

#[test]
fn under_mirrored_a_replica_that_fails_or_disagrees_stops_the_step_with_its_own_message() {
    let _alone = alone();
    let fails = |mode: Mode, replicas: usize| {
        let mut m = with_step(mode);
        mirrored(&mut m, replicas);
        fit(&mut m, 1, OnNan::Stop).unwrap_err().to_string()
    };
    let e = fails(Mode::Fails, 2);
    assert_eq!(
        e,
        "train step \"by-hand\": step: the discriminator is missing"
    );
    let e = fails(Mode::Panics, 2);
    assert!(
        e.contains("panicked: index out of bounds in the user's step"),
        "{e}"
    );
    // Three replicas of 6, 6 and 4 rows: replica 2 applies no gradients.
    let e = fails(Mode::SmallSkips, 3);
    assert_eq!(
        e,
        "train step \"by-hand\": step: replica 2 ended its step while replica 0 called \
         apply_gradients on [main]: every replica must call apply_gradients the same \
         times, with the same parts"
    );
}

#[test]
fn mirrored_keeps_the_loss_scale_and_the_deferred_reads_of_one_device() {
    let _alone = alone();
    let mut one = float16(true);
    let want = fit(&mut one, 3, OnNan::Stop).unwrap();
    let mut two = float16(true);
    mirrored(&mut two, 2);
    let got = fit(&mut two, 3, OnNan::Stop).unwrap();
    // The replicas check the summed gradients: they grow or halve the scale together.
    assert_eq!(got.history["loss_scale"], want.history["loss_scale"]);
    let w = |m: &Model| weights(m.spec(), m.network());
    close(&w(&two), &w(&one), 1e-3);
    let (mut every_step, mut windows) = (every(Mode::Plain, 1), every(Mode::Plain, 3));
    mirrored(&mut every_step, 2);
    mirrored(&mut windows, 2);
    let h1 = fit(&mut every_step, 2, OnNan::Stop).unwrap();
    let h3 = fit(&mut windows, 2, OnNan::Stop).unwrap();
    assert_eq!(w(&windows), w(&every_step));
    assert_eq!(h3.history["loss"], h1.history["loss"]);
    let p3 = h3.profile.unwrap();
    assert_eq!(
        (p3.steps, p3.host_reads),
        (4, 2),
        "the replicas' logs stay on the device"
    );
}

/// `n` draws of standard normal noise on `device`.
fn noise(n: usize, device: &Device) -> Vec<f32> {
    Tensor::<1>::random([n], Distribution::Normal(0.0, 1.0), device)
        .into_data()
        .iter::<f32>()
        .collect()
}

#[test]
fn a_steps_draws_depend_on_its_seed_the_replica_and_the_updates_before_only() {
    let _alone = alone();
    use kiln::step::custom::{Part, draw_seed};
    let device = Device::flex();
    let spec = PartSpec {
        name: "main".into(),
        model: common::two_layer_spec(4, 2),
        optimizer: common::adam(0.01),
        gradients: GradientOptions::default(),
    };
    // Replica `r` of a step seeded 11: noise, an update, noise.
    let draws = |r: usize| {
        let mut parts = Parts::new(Part::init(&spec, 3, &device), Vec::new());
        parts.start_draws(11, r, &device);
        let before = noise(5, &device);
        // Whatever was drawn meanwhile (another replica's turn) does not matter.
        noise(7, &device);
        let x = Act::Flat(Tensor::ones([2, 2], &device.clone().autodiff()));
        let out = parts.main().call(x, true).unwrap().into_flat();
        parts
            .apply_gradients(out.sum().reshape([1]), &["main"])
            .unwrap();
        (before, noise(5, &device))
    };
    let (b0, a0) = draws(0);
    device.seed(11);
    assert_eq!(
        b0,
        noise(5, &device),
        "replica 0 first draws the step's own seed"
    );
    device.seed(draw_seed(11, 0, 1));
    assert_eq!(
        a0,
        noise(5, &device),
        "after an update: the seed of (step, replica, 1)"
    );
    let (b1, a1) = draws(1);
    device.seed(draw_seed(11, 1, 0));
    assert_eq!(b1, noise(5, &device));
    device.seed(draw_seed(11, 1, 1));
    assert_eq!(a1, noise(5, &device));
    let all = [&b0, &a0, &b1, &a1];
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a, b, "every stretch has its own stream");
        }
    }
}

#[test]
fn mirrored_replicas_draw_their_own_noise_the_same_on_every_run() {
    let _alone = alone();
    let run = |replicas: usize| {
        let mut m = with_step(Mode::Noisy);
        mirrored(&mut m, replicas);
        let h = fit(&mut m, 2, OnNan::Stop).unwrap();
        (weights(m.spec(), m.network()), h.history["loss"].clone())
    };
    let (a, la) = run(2);
    let (b, lb) = run(2);
    assert_eq!(
        a, b,
        "replicas take turns in a fixed order: the same draws every run"
    );
    assert_eq!(la, lb);
    // Replica 1 draws other noise than the one device's second half of the batch.
    let (one, _) = run(1);
    assert_ne!(a, one);
}
