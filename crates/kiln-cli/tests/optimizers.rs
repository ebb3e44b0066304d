//! The optimizers and learning-rate schedules as a user meets them in a config: `kiln train`
//! with `optimizer = "rmsprop"` and with a schedule as the learning rate trains and writes the
//! resolved optimizer; a bad schedule argument or a rate-setting callback next to a schedule
//! is a one-line config error with exit code 2.

use std::path::Path;

mod common;
use common::{mlp_config, require_data, scratch, text, train_command};

/// The MLP config of `common` with `optimizer` instead of AdamW; 256 examples, one epoch.
fn config(dir: &Path, name: &str, optimizer: &str, extra: &str) -> std::path::PathBuf {
    let path = mlp_config(dir, 256, 1, 1000, extra);
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "optimizer = { type = \"adamw\", learning_rate = 0.01 }",
        &format!("optimizer = {optimizer}"),
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn losses(run: &Path) -> Vec<f64> {
    let history: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("history.json")).unwrap()).unwrap();
    history["history"]["loss"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

#[test]
fn rmsprop_and_a_scheduled_rate_train_from_a_config() {
    require_data();
    let dir = scratch("optimizers");
    for (name, optimizer, resolved) in [
        ("rmsprop", "\"rmsprop\"", "type = \"RMSprop\""),
        (
            "scheduled",
            "{ type = \"nadam\", learning_rate = { type = \"CosineDecay\", \
             initial_learning_rate = 0.01, decay_steps = 8 } }",
            "type = \"CosineDecay\"",
        ),
    ] {
        let run = dir.join(format!("run-{name}"));
        let o = train_command(&config(&dir, name, optimizer, ""), &run, &[])
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {}", text(&o.stderr));
        let loss = losses(&run);
        // Ten classes start near ln 10 = 2.30; one epoch of 8 steps lowers the mean.
        assert!(loss[0].is_finite() && loss[0] < 2.25, "{name}: {loss:?}");
        let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
        assert!(config.contains(resolved), "{name}: {config}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_schedules_are_config_errors_naming_the_key() {
    let dir = scratch("optimizer-errors");
    for (optimizer, extra, needle) in [
        (
            "{ type = \"sgd\", learning_rate = { type = \"ExponentialDecay\", \
             initial_learning_rate = 0.1, decay_steps = 0, decay_rate = 0.9 } }",
            "",
            "compile.optimizer.learning_rate.decay_steps: must be positive, got 0",
        ),
        (
            "\"adabelief\"",
            "",
            "compile.optimizer.type: unknown optimizer \"adabelief\"",
        ),
        (
            "{ type = \"adam\", learning_rate = { type = \"InverseTimeDecay\", \
             initial_learning_rate = 0.1, decay_steps = 10, decay_rate = 0.5 } }",
            "[[callbacks]]\ntype = \"ReduceLROnPlateau\"\nmonitor = \"loss\"\n",
            "callbacks[1].type: ReduceLROnPlateau sets the learning rate, but \
             compile.optimizer.learning_rate is a schedule",
        ),
    ] {
        let path = config(&dir, "bad", optimizer, extra);
        let o = train_command(&path, &dir.join("run"), &[])
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{optimizer}: {err}");
        assert!(err.contains(needle), "{optimizer}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
