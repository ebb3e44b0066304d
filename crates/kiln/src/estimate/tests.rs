//! The estimate's formulas on known models, and the seed's verdicts.

use super::*;
use crate::config::RunConfig;
use crate::device::DeviceKind;

fn example(path: &str) -> RunConfig {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(path);
    RunConfig::load(&p).unwrap()
}

const GIB: u64 = 1 << 30;

#[test]
fn parameter_terms_follow_zero_bytes_per_parameter() {
    let cfg = example("bert-large.toml");
    let opt = &cfg.compile.optimizer;
    let p = 335_143_938u64;
    let f32 = estimate(&cfg.model, opt, 8, Precision::Float32);
    assert_eq!(f32.params(), p);
    assert_eq!(f32.optimizer_slots, 2);
    // float32 Adam: 4 (weights) + 4 (gradients) + 8 (moments) = 16 bytes per parameter.
    assert_eq!(
        f32.weight_bytes() + f32.gradient_bytes() + f32.optimizer_bytes(),
        16 * p
    );
    // Mixed: 4 (master) + 2 (compute copy) + 2 (gradients) + 8 = 16, as ZeRO's 2+2+12.
    let mixed = estimate(&cfg.model, opt, 8, Precision::MixedBFloat16);
    assert_eq!(
        mixed.weight_bytes() + mixed.gradient_bytes() + mixed.optimizer_bytes(),
        16 * p
    );
    // Activations halve with 2-byte values (the float32 input batch aside).
    let ratio = (f32.activation_bytes() - f32.input_bytes) as f64
        / (mixed.activation_bytes() - mixed.input_bytes) as f64;
    assert!((ratio - 2.0).abs() < 1e-6, "{ratio}");
}

#[test]
fn bert_large_activations_have_korthikantis_form() {
    // Per encoder layer and example: 18.5·s·h + 3·a·s² values (measured on kiln; Korthikanti
    // et al. 2022 count 17·s·h + 2.5·a·s² at 2 bytes with dropout masks).
    let cfg = example("bert-large.toml");
    let e = estimate(&cfg.model, &cfg.compile.optimizer, 8, Precision::Float32);
    let layer = e
        .layers
        .iter()
        .find(|l| l.name == "transformer_layer_3")
        .unwrap();
    let (s, h, a) = (128.0, 1024.0, 16.0);
    // Output (kept by the next layer's projections) + extras.
    let want = (1.0 + 1.1 * 4.0 + 3.0 * a * s / h + 5.6 + 2.0 * 4.0) * s * h;
    let got = layer.activation_bytes as f64 / 8.0 / 4.0;
    assert!((got - want).abs() < 1.0, "{got} vs {want}");
    assert!((got / (s * h) - (19.0 + 3.0 * a * s / h)).abs() < 0.01);
}

#[test]
fn resnet50_float32_trains_at_batch_32_in_8_gb() {
    let cfg = example("resnet50.toml");
    let e = estimate(&cfg.model, &cfg.compile.optimizer, 32, Precision::Float32);
    assert_eq!(e.params(), 25_636_712);
    assert_eq!(e.optimizer_slots, 1); // SGD with momentum
    assert!(
        e.device_bytes() < search::gpu_usable_bytes(8),
        "{}",
        e.device_bytes()
    );
    assert!(e.device_bytes() > 3 * GIB, "{}", e.device_bytes());
    let text = report(&e, Some(8 * GIB), &|b| {
        estimate(&cfg.model, &cfg.compile.optimizer, b, Precision::Float32)
    });
    assert!(text.contains("8 GB fits"), "{text}");
    // The table's total row (after the dashes): its Params column holds the parameter count.
    let total = text
        .lines()
        .skip_while(|l| !l.starts_with("---"))
        .nth(1)
        .unwrap_or_else(|| panic!("no Total row: {text}"));
    assert!(total.starts_with("Total "), "{text}");
    assert_eq!(
        total.split_whitespace().nth(1),
        Some("25,636,712"),
        "{text}"
    );
}

/// examples/bert-large.toml at another sequence length.
fn bert_at(seq: usize) -> RunConfig {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/bert-large.toml");
    let text = std::fs::read_to_string(p)
        .unwrap()
        .replace("shape = [128]", &format!("shape = [{seq}]"))
        .replace(
            "cropping = [0, 127]",
            &format!("cropping = [0, {}]", seq - 1),
        );
    RunConfig::from_toml_str(&text).unwrap()
}

#[test]
fn bert_large_with_adamw_needs_more_than_12_gb_at_long_sequences() {
    // kiln's count at sequence length 128, batch 8, float32 AdamW: 16 B x 335.1M parameters
    // (4.99 GiB) + 2.35 GiB of activations + workspace = 7.38 GiB. That fits 12 GB: kiln's
    // graph keeps about 4x less per layer than TensorFlow 1's BERT, whose README measured a
    // largest batch of 6 at length 128 on a 12 GB GPU (google-research/bert, "Out-of-memory
    // issues"). At length 512 the attention scores dominate and batch 8 needs ~22 GiB.
    let at = |seq: usize, batch: usize| {
        let cfg = bert_at(seq);
        estimate(
            &cfg.model,
            &cfg.compile.optimizer,
            batch,
            Precision::Float32,
        )
    };
    let e = at(128, 8);
    assert!(
        (7.3..7.5).contains(&(e.device_bytes() as f64 / GIB as f64)),
        "{}",
        e.device_bytes()
    );
    assert!(at(512, 8).device_bytes() > 12 * GIB);
    assert!(at(512, 8).device_bytes() > search::gpu_usable_bytes(16));
    // Mixed precision halves the activations: length 512, batch 8 then fits 16 GB.
    let cfg = bert_at(512);
    let mixed = estimate(
        &cfg.model,
        &cfg.compile.optimizer,
        8,
        Precision::MixedBFloat16,
    );
    assert!(
        mixed.device_bytes() < search::gpu_usable_bytes(16),
        "{}",
        mixed.device_bytes()
    );
}

#[test]
fn max_batch_size_is_the_largest_that_fits() {
    // bytes(b) = 100 + 10·b: budget 1000 -> 90.
    assert_eq!(
        max_batch_size(1000, 1 << 20, |b| 100 + 10 * b as u64),
        Some(90)
    );
    assert_eq!(
        max_batch_size(110, 1 << 20, |b| 100 + 10 * b as u64),
        Some(1)
    );
    assert_eq!(max_batch_size(109, 1 << 20, |b| 100 + 10 * b as u64), None);
    assert_eq!(max_batch_size(1000, 64, |b| 100 + 10 * b as u64), Some(64));
    // Powers of two are found exactly.
    assert_eq!(
        max_batch_size(1 << 10, 1 << 20, |b| b as u64 * 4),
        Some(256)
    );
}

#[test]
fn auto_batch_size_picks_the_largest_fitting_batch_and_says_why() {
    let cfg = example("fashion-mnist/mlp.toml");
    let opt = &cfg.compile.optimizer;
    let at = |b| estimate(&cfg.model, opt, b, Precision::Float32).total_bytes();
    let budget = at(1000) + 1;
    let auto = auto_batch_size(
        DeviceKind::Gpu,
        &cfg.model,
        opt,
        Precision::Float32,
        budget,
        60_000,
        None,
    )
    .unwrap();
    assert_eq!(auto.batch_size, 1000);
    assert!(auto.reason.contains("chose 1000"), "{}", auto.reason);
    assert!(
        auto.reason.contains("batch 1001 would need"),
        "{}",
        auto.reason
    );
    // The training set caps it.
    let auto = auto_batch_size(
        DeviceKind::Gpu,
        &cfg.model,
        opt,
        Precision::Float32,
        64 * GIB,
        500,
        None,
    )
    .unwrap();
    assert_eq!(auto.batch_size, 500);
    // Too small a budget: refused with the numbers and remedies.
    let e = auto_batch_size(
        DeviceKind::Gpu,
        &cfg.model,
        opt,
        Precision::Float32,
        1 << 20,
        500,
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("fit.batch_size") && e.contains("mixed"), "{e}");
}

/// A pipeline's stages split BERT-large's memory: balanced by parameters into 4 stages of
/// 82–88 M parameters each (16 bytes per parameter with AdamW in float32), whose parameters
/// add up to the model's, each stage's peak well under the one-device peak.
#[test]
fn pipeline_stages_split_bert_large() {
    let mut cfg = example("bert-large.toml");
    cfg.distribute.strategy = crate::config::StrategyKind::Pipeline;
    cfg.distribute.stages = Some(crate::distribute::Stages::Count(4));
    let stages = cfg.distribute.pipeline_plan(&cfg.model).unwrap().unwrap();
    let e = estimate(&cfg.model, &cfg.compile.optimizer, 8, Precision::Float32);
    let text = stage_report(&e, &stages);
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(
        text.contains(
            "stage 1: transformer_layer_4 … transformer_layer_10 (7 layers), 88,173,568 parameters"
        ),
        "{text}"
    );
    let params: u64 = stages
        .iter()
        .flat_map(|r| &e.layers[r.clone()])
        .map(|l| l.trainable + l.non_trainable)
        .sum();
    assert_eq!(params, 335_143_938);
    // 88,173,568 × 16 bytes = 1.31 GiB of weights, gradients and moments on stage 1.
    assert!(
        text.contains("weights, gradients and optimizer 1.31 GiB"),
        "{text}"
    );
}
