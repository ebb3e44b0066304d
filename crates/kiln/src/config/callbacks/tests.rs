use super::*;
use crate::fit::{Logs, ManualContext};

/// A minimal config with `callbacks` appended (TOML text of `[[callbacks]]` tables).
fn config(callbacks: &str) -> String {
    format!(
        r#"name = "t"
[data]
[model]
layers = [{{ type = "Input", shape = [4] }}, {{ type = "Dense", units = 3 }}]
[compile]
optimizer = "sgd"
loss = "sparse_categorical_crossentropy"
metrics = ["accuracy"]
[fit]
epochs = 2
{callbacks}
"#
    )
}

fn parse(callbacks: &str) -> Result<RunConfig> {
    RunConfig::from_toml_str(&config(callbacks))
}

fn err(callbacks: &str) -> String {
    parse(callbacks).unwrap_err().to_string()
}

const ALL: &str = r#"
[[callbacks]]
type = "EarlyStopping"
monitor = "val_accuracy"
min_delta = 0.001
patience = 3
verbose = 1
baseline = 0.5
restore_best_weights = true
start_from_epoch = 2

[[callbacks]]
type = "BackupAndRestore"
backup_dir = "ckpt"
save_freq = 50
keep = 2

[[callbacks]]
type = "ReduceLROnPlateau"
factor = 0.5
patience = 2
mode = "min"
cooldown = 1
min_lr = 1e-5

[[callbacks]]
type = "LearningRateScheduler"
schedule = { type = "CosineDecay", initial_learning_rate = 0.01, decay_steps = 100, warmup_target = 0.1, warmup_steps = 10 }
unit = "step"

[[callbacks]]
type = "CSVLogger"
filename = "log.csv"
separator = ";"
append = true

[[callbacks]]
type = "TerminateOnNaN"
raise_error = true

[[callbacks]]
type = "TensorBoard"
histogram_freq = 1
update_freq = "batch"

[[callbacks]]
type = "ModelCheckpoint"
filepath = "best-{epoch:02d}-{val_loss:.2f}.safetensors"
save_best_only = true
save_freq = "epoch"
initial_value_threshold = 2.5
"#;

#[test]
fn every_type_reads_with_keras_names_and_defaults() {
    let cfg = parse(ALL).unwrap();
    let types: Vec<&str> = cfg.callbacks.iter().map(CallbackSpec::type_name).collect();
    // BackupAndRestore is taken out of the list into `backup`; the others keep their order.
    assert_eq!(
        types,
        [
            "EarlyStopping",
            "ReduceLROnPlateau",
            "LearningRateScheduler",
            "CSVLogger",
            "TerminateOnNaN",
            "TensorBoard",
            "ModelCheckpoint"
        ]
    );
    assert_eq!(
        cfg.backup,
        BackupSpec {
            backup_dir: "ckpt".into(),
            save_freq: SaveFreq::Batches(50),
            delete_checkpoint: false,
            keep: 2,
        }
    );
    assert_eq!(
        cfg.callbacks[0],
        CallbackSpec::EarlyStopping(EarlyStoppingSpec {
            monitor: "val_accuracy".into(),
            min_delta: 0.001,
            patience: 3,
            verbose: 1,
            mode: Mode::Auto,
            baseline: Some(0.5),
            restore_best_weights: true,
            start_from_epoch: 2,
        })
    );
    // Keras' defaults for what is not written.
    assert_eq!(
        cfg.callbacks[1],
        CallbackSpec::ReduceLROnPlateau(ReduceLROnPlateauSpec {
            monitor: "val_loss".into(),
            factor: 0.5,
            patience: 2,
            verbose: 0,
            mode: Mode::Min,
            min_delta: 1e-4,
            cooldown: 1,
            min_lr: 1e-5,
        })
    );
    assert_eq!(
        cfg.callbacks[2],
        CallbackSpec::LearningRateScheduler(LearningRateSchedulerSpec {
            schedule: Schedule::CosineDecay {
                initial_learning_rate: 0.01,
                decay_steps: 100,
                alpha: 0.0,
                warmup_target: Some(0.1),
                warmup_steps: 10,
            },
            unit: ScheduleUnit::Step,
            verbose: 0,
        })
    );
    let CallbackSpec::TensorBoard(tb) = &cfg.callbacks[5] else {
        panic!()
    };
    assert_eq!(
        (tb.log_dir.as_path(), tb.update_freq),
        (Path::new("logs"), UpdateFreq::Batches(1))
    );
    let CallbackSpec::ModelCheckpoint(mc) = &cfg.callbacks[6] else {
        panic!()
    };
    assert_eq!(
        (
            mc.monitor.as_str(),
            mc.save_freq,
            mc.initial_value_threshold
        ),
        ("val_loss", SaveFreq::Epoch, Some(2.5))
    );
    let built = cfg.build_callbacks(Path::new("runs/t")).unwrap();
    assert_eq!(built.len(), 7);
    let backup = CallbackSpec::BackupAndRestore(BackupSpec::default());
    assert!(backup.build(Path::new(".")).unwrap().is_none());
}

#[test]
fn the_resolved_config_round_trips_callbacks_and_backup() {
    let cfg = parse(ALL).unwrap();
    let text = cfg.to_toml();
    assert!(text.contains("[[callbacks]]"), "{text}");
    let again = RunConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(again.callbacks, cfg.callbacks);
    assert_eq!(again.backup, cfg.backup);
    // Every schedule and update_freq form survives too.
    for (schedule, update_freq) in [
        (
            r#"{ type = "ExponentialDecay", initial_learning_rate = 0.1, decay_steps = 10, decay_rate = 0.5, staircase = true }"#,
            "\"epoch\"",
        ),
        (
            r#"{ type = "PiecewiseConstantDecay", boundaries = [10, 20], values = [1.0, 0.5, 0.1] }"#,
            "25",
        ),
        (
            r#"{ type = "StepDecay", initial_learning_rate = 0.1, factor = 0.5, step_size = 3 }"#,
            "\"batch\"",
        ),
    ] {
        let cfg = parse(&format!(
            "[[callbacks]]\ntype = \"LearningRateScheduler\"\nschedule = {schedule}\n\
             [[callbacks]]\ntype = \"TensorBoard\"\nupdate_freq = {update_freq}\n"
        ))
        .unwrap();
        let again = RunConfig::from_toml_str(&cfg.to_toml()).unwrap();
        assert_eq!(again.callbacks, cfg.callbacks);
    }
    // Without [[callbacks]] and with the default backup, nothing is written.
    let plain = parse("").unwrap();
    assert!(plain.callbacks.is_empty() && plain.backup == BackupSpec::default());
    assert!(!plain.to_toml().contains("callbacks"));
}

#[test]
fn errors_name_the_entry_and_the_argument() {
    let cases = [
        (
            "[[callbacks]]\ntype = \"EarlyStop\"",
            "callbacks[0].type: unknown callback type \"EarlyStop\"; allowed: EarlyStopping, \
             ReduceLROnPlateau, LearningRateScheduler, CSVLogger, TerminateOnNaN, TensorBoard, \
             ModelCheckpoint, BackupAndRestore",
        ),
        (
            "[[callbacks]]\npatience = 3",
            "callbacks[0].type: missing; allowed: EarlyStopping,",
        ),
        (
            "[[callbacks]]\ntype = \"TerminateOnNaN\"\n[[callbacks]]\ntype = \"EarlyStopping\"\npatiance = 3",
            "callbacks[1].patiance: EarlyStopping has no argument `patiance`: unknown field \
             `patiance`, expected one of `monitor`,",
        ),
        (
            "[[callbacks]]\ntype = \"EarlyStopping\"\npatience = -1",
            "callbacks[0].patience: invalid value: integer `-1`, expected a non-negative integer",
        ),
        (
            "[[callbacks]]\ntype = \"EarlyStopping\"\nmode = \"maximum\"",
            "callbacks[0].mode: unknown variant `maximum`, expected one of `auto`, `min`, `max`",
        ),
        (
            "[[callbacks]]\ntype = \"EarlyStopping\"\nmonitor = \"val_custom\"",
            "callbacks[0].mode: cannot tell whether monitor \"val_custom\" should be maximized",
        ),
        (
            "[[callbacks]]\ntype = \"ReduceLROnPlateau\"\nfactor = 1.5",
            "callbacks[0].factor: must be between 0 and 1 (exclusive), got 1.5",
        ),
        (
            "[[callbacks]]\ntype = \"CSVLogger\"",
            "callbacks[0].filename: missing: CSVLogger needs `filename`",
        ),
        (
            "[[callbacks]]\ntype = \"CSVLogger\"\nfilename = \"a.csv\"\nseparator = \"::\"",
            "callbacks[0].separator: must be one character",
        ),
        (
            "[[callbacks]]\ntype = \"TensorBoard\"\nupdate_freq = 0",
            "callbacks[0].update_freq: invalid value: integer `0`, expected \"epoch\", \"batch\" \
             or a number of batches >= 1",
        ),
        (
            "[[callbacks]]\ntype = \"TensorBoard\"\nwrite_graph = true",
            "callbacks[0].write_graph: TensorBoard has no argument `write_graph`",
        ),
        (
            "[[callbacks]]\ntype = \"LearningRateScheduler\"\nschedule = { type = \"CosineDecay\", initial_learning_rate = 0.1, decay_steps = 0 }",
            "callbacks[0].schedule.decay_steps: must be positive, got 0",
        ),
        (
            "[[callbacks]]\ntype = \"LearningRateScheduler\"\nschedule = { type = \"CosineDecay\", initial_learning_rate = 0.1, decay_step = 10 }",
            "callbacks[0].schedule: unknown field `decay_step`, expected one of",
        ),
        (
            "[[callbacks]]\ntype = \"LearningRateScheduler\"\nschedule = { initial_learning_rate = 0.1 }",
            "callbacks[0].schedule: missing field `type`",
        ),
        (
            "[[callbacks]]\ntype = \"LearningRateScheduler\"\nschedule = { type = \"StepDecay\", initial_learning_rate = 0.1, factor = 0.5, step_size = 2 }\nunit = \"batch\"",
            "callbacks[0].unit: unknown variant `batch`, expected `epoch` or `step`",
        ),
        (
            "[[callbacks]]\ntype = \"ModelCheckpoint\"\nfilepath = \"best.keras\"",
            "callbacks[0].filepath: \"best.keras\" must end in .safetensors",
        ),
        (
            "[[callbacks]]\ntype = \"ModelCheckpoint\"\nfilepath = \"b{batch}.safetensors\"",
            "callbacks[0].filepath: \"b{batch}.safetensors\" uses {batch}",
        ),
        (
            "[[callbacks]]\ntype = \"ModelCheckpoint\"\nfilepath = \"b.safetensors\"\nsave_freq = 0",
            "callbacks[0].save_freq: must be \"epoch\" or a positive number of batches",
        ),
        (
            "[[callbacks]]\ntype = \"BackupAndRestore\"\nkeep = 0",
            "callbacks[0].keep: must be at least 1",
        ),
        (
            "[[callbacks]]\ntype = \"BackupAndRestore\"\n[[callbacks]]\ntype = \"BackupAndRestore\"",
            "callbacks[1].type: a second BackupAndRestore (the first is callbacks[0])",
        ),
    ];
    for (toml, want) in cases {
        let got = err(toml);
        assert!(got.starts_with(want), "{toml}\n got: {got}\nwant: {want}");
    }
}

#[test]
fn relative_paths_are_inside_the_run_directory() {
    let run = tempfile::tempdir().unwrap();
    let cfg = parse(
        r#"
[[callbacks]]
type = "CSVLogger"
filename = "logs/history.csv"
[[callbacks]]
type = "TensorBoard"
[[callbacks]]
type = "ModelCheckpoint"
filepath = "ckpt/e{epoch}.safetensors"
"#,
    )
    .unwrap();
    let mut built = cfg.build_callbacks(run.path()).unwrap();
    let mut ctx = ManualContext::new(0.1);
    for cb in built.iter_mut() {
        cb.on_train_begin(&mut ctx).unwrap();
        let mut logs = Logs::default();
        logs.set("loss", 0.5);
        logs.set("val_loss", 0.25);
        cb.on_epoch_end(0, &mut logs, &mut ctx).unwrap();
        cb.on_train_end(&logs, &mut ctx).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(run.path().join("logs/history.csv")).unwrap(),
        "epoch,loss,val_loss\r\n0,0.5,0.25\r\n"
    );
    assert_eq!(
        crate::summary::read_scalars(&run.path().join("logs/train"), "epoch_loss").unwrap(),
        vec![(0, 0.5)]
    );
    assert!(run.path().join("ckpt/e1.safetensors").is_file());
}

#[test]
fn the_pipeline_example_declares_its_callbacks() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/fashion-mnist/cnn-pipeline.toml");
    let cfg = RunConfig::load(&path).unwrap();
    let types: Vec<&str> = cfg.callbacks.iter().map(CallbackSpec::type_name).collect();
    assert_eq!(types, ["TensorBoard", "CSVLogger", "ModelCheckpoint"]);
    // Its BackupAndRestore entry spells out the defaults: nothing changes in training.
    assert_eq!(cfg.backup, BackupSpec::default());
    let CallbackSpec::ModelCheckpoint(mc) = &cfg.callbacks[2] else {
        panic!()
    };
    assert!(mc.save_best_only && mc.monitor == "val_loss");
}

#[test]
fn tensorboard_hparams_read_and_round_trip() {
    let cfg = parse(
        "[[callbacks]]\ntype = \"TensorBoard\"\nhparams = { learning_rate = 0.001, units = 64, optimizer = \"adamw\", bias = true }",
    )
    .unwrap();
    let CallbackSpec::TensorBoard(tb) = &cfg.callbacks[0] else {
        panic!()
    };
    use crate::summary::hparams::HParamValue;
    assert_eq!(tb.hparams["learning_rate"], HParamValue::Float(0.001));
    assert_eq!(tb.hparams["units"], HParamValue::Int(64));
    assert_eq!(tb.hparams["optimizer"], HParamValue::Str("adamw".into()));
    assert_eq!(tb.hparams["bias"], HParamValue::Bool(true));
    let table = cfg.callbacks[0].to_toml();
    assert_eq!(table["hparams"]["units"].as_integer(), Some(64));
    // Without hparams, the resolved config does not list the key.
    let cfg = parse("[[callbacks]]\ntype = \"TensorBoard\"").unwrap();
    assert!(cfg.callbacks[0].to_toml().get("hparams").is_none());
    let e = err("[[callbacks]]\ntype = \"TensorBoard\"\nhparams = { units = [1, 2] }");
    assert!(e.starts_with("callbacks[0].hparams"), "{e}");
}
