//! Tune files read, checked and turned into trial configs.

use super::*;
use crate::trial::Params;

const BASE: &str = r#"
name = "mlp"
seed = 42
[data]
data_dir = "data"
[model]
layers = [
  { type = "Input", shape = [28, 28] },
  { type = "Flatten" },
  { type = "Dense", units = 512, activation = "relu" },
  { type = "Dense", units = 10, activation = "softmax" },
]
[compile]
optimizer = "adamw"
loss = "sparse_categorical_crossentropy"
metrics = ["accuracy"]
[fit]
epochs = 10
"#;

const TUNE: &str = r#"
base = "base.toml"
[tuner]
objective = "val_accuracy"
max_trials = 4
max_retries_per_trial = 1
seed = 3
[overrides]
"fit.epochs" = 2
"compile.optimizer" = { type = "AdamW" }
[[hyperparameters]]
name = "lr"
key = "compile.optimizer.learning_rate"
type = "Float"
min_value = 0.0001
max_value = 0.01
[[hyperparameters]]
name = "units"
key = "model.layers[2].units"
type = "Choice"
values = [64, 128]
"#;

fn write(dir: &Path, tune: &str) -> PathBuf {
    std::fs::write(dir.join("base.toml"), BASE).unwrap();
    let p = dir.join("study.toml");
    std::fs::write(&p, tune).unwrap();
    p
}

fn plan(lr: f64, units: i64) -> TrialPlan {
    let mut params = Params::new();
    params.insert("lr".into(), Value::Float(lr));
    params.insert("units".into(), Value::Int(units));
    TrialPlan {
        params,
        epochs: 0,
        resume_from: None,
        bracket: None,
    }
}

#[test]
fn reads_the_settings_and_makes_complete_trial_configs() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = TuneConfig::load(&write(dir.path(), TUNE)).unwrap();
    assert_eq!(cfg.settings.max_trials, 4);
    assert_eq!(cfg.settings.max_retries_per_trial, 1);
    assert_eq!(cfg.settings.executions_per_trial, 1);
    assert_eq!(cfg.settings.max_consecutive_failed_trials, 3);
    assert_eq!(
        cfg.settings.grace_period,
        2.0 * cfg.settings.heartbeat_interval
    );
    assert_eq!(cfg.settings.study_name, "study");
    assert_eq!(cfg.objective.direction, crate::trial::Direction::Max);
    let t = cfg.run_config(&plan(0.003, 128), 0).unwrap();
    assert_eq!(
        keypath::get(&t, "fit.epochs"),
        Some(&toml::Value::Integer(2))
    );
    assert_eq!(
        keypath::get(&t, "compile.optimizer.learning_rate"),
        Some(&toml::Value::Float(0.003))
    );
    assert_eq!(
        keypath::get(&t, "compile.optimizer.type").unwrap().as_str(),
        Some("AdamW")
    );
    assert_eq!(
        keypath::get(&t, "model.layers[2].units"),
        Some(&toml::Value::Integer(128))
    );
    assert_eq!(t["seed"].as_integer(), Some(42));
    // data_dir made absolute from the current directory, as kiln train resolves it.
    let data_dir = PathBuf::from(t["data"]["data_dir"].as_str().unwrap());
    assert_eq!(data_dir, std::env::current_dir().unwrap().join("data"));
    // A second execution trains with the next seed.
    assert_eq!(
        cfg.run_config(&plan(0.003, 128), 1).unwrap()["seed"].as_integer(),
        Some(43)
    );
    // Hyperband plans set the epochs.
    let mut hb = plan(0.003, 64);
    hb.bracket = Some((1, 0));
    hb.epochs = 9;
    assert_eq!(hb.epochs_override(), Some(9));
    assert_eq!(
        keypath::get(&cfg.run_config(&hb, 0).unwrap(), "fit.epochs"),
        Some(&toml::Value::Integer(9))
    );
    // The trial config adds the CSVLogger and TensorBoard, and round-trips through TOML.
    let trial = cfg
        .trial_config(&plan(0.003, 128), 0, Path::new("/s/logs/0"))
        .unwrap();
    let text = toml::to_string_pretty(&trial).unwrap();
    let back: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(back, trial);
    let callbacks = back["callbacks"].as_array().unwrap();
    assert_eq!(callbacks[0]["type"].as_str(), Some("CSVLogger"));
    assert_eq!(callbacks[0]["filename"].as_str(), Some(EPOCHS_CSV));
    assert_eq!(callbacks[1]["type"].as_str(), Some("TensorBoard"));
    assert_eq!(callbacks[1]["log_dir"].as_str(), Some("/s/logs/0"));
    assert_eq!(callbacks[1]["hparams"]["units"].as_integer(), Some(128));
    assert_eq!(callbacks[1]["hparams"]["lr"].as_float(), Some(0.003));
}

#[test]
fn config_errors_name_the_file_the_key_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let err = |tune: &str| {
        TuneConfig::load(&write(dir.path(), tune))
            .unwrap_err()
            .to_string()
    };
    // The optimizer is a string in the base config and no override makes it a table.
    let e = err(&TUNE.replace("\"compile.optimizer\" = { type = \"AdamW\" }\n", ""));
    assert!(e.contains("study.toml"), "{e}");
    assert!(
        e.contains("[[hyperparameters]] \"lr\": key \"compile.optimizer.learning_rate\""),
        "{e}"
    );
    assert!(
        e.contains("\"compile.optimizer\" = { type = \"AdamW\" }"),
        "{e}"
    );
    let e = err(&TUNE.replace("max_trials = 4", "max_trial = 4"));
    assert!(e.contains("[tuner] unknown key \"max_trial\""), "{e}");
    assert!(e.contains("max_trials"), "{e}");
    let e = err(&TUNE.replace("layers[2]", "layers[7]"));
    assert!(e.contains("model.layers has 4 elements"), "{e}");
    let e = err(&TUNE.replace("\"fit.epochs\"", "\"fit.epochs.x\""));
    assert!(e.contains("[overrides] \"fit.epochs.x\""), "{e}");
    let e = err(&TUNE.replace("base = \"base.toml\"", "base = \"nope.toml\""));
    assert!(e.contains("cannot read the base run config"), "{e}");
    let e = err(&TUNE.replace("objective = \"val_accuracy\"", "objective = \"val_f2\""));
    assert!(e.contains("direction = \"max\""), "{e}");
    let e = err(&TUNE.replace("values = [64, 128]", "values = []"));
    assert!(
        e.starts_with(&format!(
            "{}: hyperparameters[1]",
            dir.path().join("study.toml").display()
        )),
        "{e}"
    );
    let e = err(&TUNE.replace("seed = 3", "seed = 3\nmax_epochs = 9"));
    assert!(
        e.contains("study.toml: tuner.max_epochs: applies to hyperband only"),
        "{e}"
    );
    let e = err(&format!("{TUNE}\n[extra]\n"));
    assert!(e.contains("unknown key \"extra\""), "{e}");
}

#[test]
fn the_settings_fingerprint_ignores_max_trials_and_sees_the_space() {
    let dir = tempfile::tempdir().unwrap();
    let a = TuneConfig::load(&write(dir.path(), TUNE)).unwrap();
    let b = TuneConfig::load(&write(
        dir.path(),
        &TUNE.replace("max_trials = 4", "max_trials = 9"),
    ))
    .unwrap();
    assert_eq!(a.settings_json(), b.settings_json());
    let c = TuneConfig::load(&write(dir.path(), &TUNE.replace("[64, 128]", "[64, 256]"))).unwrap();
    assert_eq!(
        crate::storage::changed_settings(&a.settings_json(), &c.settings_json()),
        vec!["[[hyperparameters]]".to_string()]
    );
}
