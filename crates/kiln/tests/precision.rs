//! Mixed precision through `Model::fit`: the loss scale is logged, checkpointed and continued
//! on resume; master weights and saved weights are float32; an out-of-memory batch is retried.

mod common;

use burn::prelude::Device;
use burn::tensor::DType;
use kiln::Model;
use kiln::checkpoint::CheckpointDir;
use kiln::compile::{Compiled, LossKind, LossSpec, OptimizerSpec};
use kiln::fit::{Backup, FitOptions, SaveFreq};
use kiln::precision::{LossScale, LossScaleOptions, Precision};
use kiln_data::{Array, Buffer, Dataset, Element};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// 600 points in three Gaussian-ish blobs (as `fit_synthetic.rs`), batches of 32: 19 batches
/// an epoch.
fn blobs() -> Dataset {
    let mut rng = StdRng::seed_from_u64(3);
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for i in 0..600 {
        let k = i % 3;
        let a = 2.0 * std::f32::consts::PI * k as f32 / 3.0;
        x.push(3.0 * a.cos() + rng.random_range(-1.0..1.0));
        x.push(3.0 * a.sin() + rng.random_range(-1.0..1.0));
        y.push(k as i64);
    }
    let x = Array::new(vec![600, 2], Buffer::F32(x)).unwrap();
    let y = Array::new(vec![600], Buffer::I64(y)).unwrap();
    Dataset::from_tensor_slices(Element::new().with("x", x).with("y", y))
        .unwrap()
        .shuffle(600, Some(1), true)
        .batch(32, false)
}

/// The blobs classifier under `precision`, with a loss scale that grows every 10 finite steps
/// (so that 2 epochs see it change).
fn model(precision: Precision) -> Model {
    let spec = common::two_layer_spec(16, 3).with_precision(precision);
    let compiled = Compiled::new(
        &spec,
        common::adam(0.01),
        LossSpec {
            kind: LossKind::SparseCategoricalCrossentropy,
            from_logits: true,
        },
        &["accuracy".to_string()],
    )
    .unwrap()
    .with_loss_scale(Some(LossScaleOptions {
        initial_scale: 32768.0,
        dynamic_growth_steps: 10,
    }))
    .unwrap();
    Model::new("blobs", spec, compiled, 11, Device::flex())
}

fn options(epochs: usize, dir: &CheckpointDir, resume: bool) -> FitOptions {
    FitOptions {
        backup: Some(Backup {
            dir: dir.clone(),
            save_freq: SaveFreq::Epoch,
            resume: if resume {
                dir.latest().unwrap().0
            } else {
                None
            },
            config: String::new(),
            data_fingerprints: Default::default(),
        }),
        ..FitOptions::epochs(epochs)
    }
}

fn weight_bits(m: &Model) -> Vec<u32> {
    let path = tempfile::NamedTempFile::new().unwrap();
    m.save_weights(path.path()).unwrap();
    let bytes = std::fs::read(path.path()).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out = Vec::new();
    let mut tensors = st.tensors();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, view) in tensors {
        // The saved weights are float32 under every policy.
        assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
        out.extend(
            view.data()
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap())),
        );
    }
    out
}

fn loss_scale(dir: &CheckpointDir) -> LossScale {
    dir.latest()
        .unwrap()
        .0
        .unwrap()
        .manifest
        .loss_scale
        .unwrap()
}

#[test]
fn the_loss_scale_is_logged_checkpointed_and_continued_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    // Each fit gets its own dataset: iterating one advances its shuffle seeds.
    let data = blobs();

    // Two epochs in one go.
    let whole = CheckpointDir::new(tmp.path().join("whole"), 3);
    let mut a = model(Precision::MixedFloat16);
    let history = a
        .fit_with(&data, None, &options(2, &whole, false), &mut [])
        .unwrap();
    let scales = &history.history["loss_scale"];
    assert_eq!(scales.len(), 2);
    for s in scales {
        assert_eq!(s.log2().fract(), 0.0, "not a power of two: {scales:?}");
    }
    let end = loss_scale(&whole);
    // 38 steps with growth every 10 finite ones: the scale moved off its start.
    assert_ne!(end.scale, 32768.0, "{end:?}");
    assert_eq!(end.scale, scales[1]);
    assert!(history.history["accuracy"][1] > 0.9, "{history:?}");
    for layer in &a.network().layers {
        // Master weights stay float32 under mixed_float16.
        let kernel = layer.dense_kernel.as_ref().unwrap().val();
        assert_eq!(kernel.dtype(), DType::F32);
    }

    // One epoch, then a new model resumes from the checkpoint for the second.
    let split = CheckpointDir::new(tmp.path().join("split"), 3);
    let mut b = model(Precision::MixedFloat16);
    b.fit_with(&blobs(), None, &options(1, &split, false), &mut [])
        .unwrap();
    let after_one = loss_scale(&split);
    assert_eq!(after_one.scale, scales[0]);
    let mut c = model(Precision::MixedFloat16);
    c.fit_with(&blobs(), None, &options(2, &split, true), &mut [])
        .unwrap();
    assert_eq!(loss_scale(&split), end);
    assert_eq!(
        weight_bits(&c),
        weight_bits(&a),
        "resume changed the weights"
    );
}

/// mixed_bfloat16 has no loss scale (Keras wraps only mixed_float16) and trains the blobs as
/// float32 does; its weights differ from float32's (it does round).
#[test]
fn bfloat16_trains_like_float32_without_a_loss_scale() {
    let fit = |p: Precision| {
        let spec = common::two_layer_spec(16, 3).with_precision(p);
        let compiled = Compiled::new(
            &spec,
            OptimizerSpec::from_toml(&"adam".into()).unwrap(),
            LossSpec {
                kind: LossKind::SparseCategoricalCrossentropy,
                from_logits: true,
            },
            &["accuracy".to_string()],
        )
        .unwrap();
        assert_eq!(compiled.loss_scale, None);
        let mut m = Model::new("blobs", spec, compiled, 11, Device::flex());
        let h = m.fit(&blobs(), None, 3, &mut []).unwrap();
        assert!(!h.history.contains_key("loss_scale"));
        (h.history["accuracy"][2], weight_bits(&m))
    };
    let (acc32, w32) = fit(Precision::Float32);
    let (acc16, w16) = fit(Precision::MixedBFloat16);
    assert!((acc32 - acc16).abs() < 0.02, "{acc32} vs {acc16}");
    assert_ne!(w32, w16);
}

/// `Model::inject_oom_at_step`: the batch that fails is retried in halves and the run ends on
/// the weights of the run without the failure (up to float rounding).
#[test]
fn a_fit_survives_an_out_of_memory_batch() {
    let run = |inject: Option<u64>| {
        let mut m = model(Precision::Float32);
        m.inject_oom_at_step(inject);
        let h = m.fit(&blobs(), None, 1, &mut []).unwrap();
        let w = weight_bits(&m);
        (h.history["loss"][0], w)
    };
    let (loss, w) = run(None);
    let (loss_oom, w_oom) = run(Some(3));
    assert!((loss - loss_oom).abs() < 1e-5, "{loss} vs {loss_oom}");
    for (a, b) in w.iter().zip(&w_oom) {
        let (a, b) = (f32::from_bits(*a), f32::from_bits(*b));
        assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "{a} vs {b}");
    }
}
