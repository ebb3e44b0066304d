//! A resume's check that the checkpoint still fits the run: the model unchanged, the data
//! unchanged (or allowed to change), other changed settings noted.

use std::collections::BTreeMap;
use std::path::Path;

use super::TrainOptions;
use crate::checkpoint::Manifest;
use crate::error::{KilnError, Result};

/// `table` flattened to `dotted.key -> value` (arrays of tables as `key[i]`).
fn flatten(prefix: &str, value: &toml::Value, out: &mut BTreeMap<String, String>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        toml::Value::Array(a) if a.iter().any(|v| v.is_table()) => {
            for (i, v) in a.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), v, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// The keys whose values differ between two resolved configs, as `key: old -> new` lines.
fn config_changes(old: &str, new: &str) -> Vec<(String, String)> {
    let parse = |text: &str| {
        let mut out = std::collections::BTreeMap::new();
        if let Ok(t) = toml::from_str::<toml::Table>(text) {
            flatten("", &toml::Value::Table(t), &mut out);
        }
        out
    };
    let (a, b) = (parse(old), parse(new));
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let show = |v: Option<&String>| v.cloned().unwrap_or_else(|| "(absent)".into());
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| {
            (
                (*k).clone(),
                format!("{} -> {}", show(a.get(k)), show(b.get(k))),
            )
        })
        .collect()
}

/// Refuses a resume whose model changed, or whose data changed without
/// `allow_changed_data`; notes other changed settings.
pub(super) fn check_unchanged(
    manifest: &Manifest,
    config: &str,
    fingerprints: &BTreeMap<String, String>,
    opts: &TrainOptions,
    dir: &Path,
) -> Result<()> {
    if manifest.config.is_empty() {
        return Ok(());
    }
    let changes = config_changes(&manifest.config, config);
    let model: Vec<_> = changes.iter().filter(|(k, _)| under(k, "model")).collect();
    let data = data_changes(&changes, fingerprints, manifest);
    let list = |v: &[String]| v.join("\n");
    if !model.is_empty() {
        let lines: Vec<String> = model.iter().map(|(k, v)| format!("  {k}: {v}")).collect();
        return Err(KilnError::Changed(format!(
            "cannot resume from {}: the model changed since the checkpoint was written:\n{}\n\
             The checkpoint's weights do not fit the new model. Start over with --no-resume, or \
             use another --run-dir.",
            dir.display(),
            list(&lines)
        )));
    }
    if !data.is_empty() && !opts.allow_changed_data {
        return Err(KilnError::Changed(format!(
            "cannot resume from {}: the data or its pipeline changed since the checkpoint was \
             written:\n{}\nResume anyway with --allow-changed-data, or start over with \
             --no-resume.",
            dir.display(),
            list(&data)
        )));
    }
    let others: Vec<String> = changes
        .iter()
        .filter(|(k, _)| !under(k, "model") && !under(k, "data"))
        .filter(|(k, _)| k != "seed" || data.is_empty())
        .map(|(k, v)| format!("  {k}: {v}"))
        .collect();
    if !data.is_empty() {
        (opts.notes)(&format!(
            "note: resuming with changed data (--allow-changed-data):\n{}",
            list(&data)
        ));
    }
    if !others.is_empty() {
        (opts.notes)(&format!(
            "note: resuming with changed settings:\n{}\n(the checkpoint's learning rate and \
             optimizer state are kept: start over with --no-resume to apply optimizer changes)",
            list(&others)
        ));
    }
    Ok(())
}

/// The changes of the data since the checkpoint: its `data.*` keys, else the first split whose
/// fingerprint changed (said as a seed change, or a change in the number of workers that read
/// the files, when that explains it).
fn data_changes(
    changes: &[(String, String)],
    fingerprints: &BTreeMap<String, String>,
    manifest: &Manifest,
) -> Vec<String> {
    let mut data: Vec<String> = changes
        .iter()
        .filter(|(k, _)| under(k, "data"))
        .map(|(k, v)| format!("  {k}: {v}"))
        .collect();
    let seed = changes.iter().find(|(k, _)| k == "seed");
    for (split, fp) in fingerprints {
        match (manifest.data_fingerprints.get(split), seed) {
            (Some(old), Some((_, v))) if old != fp && data.is_empty() => data.push(format!(
                "  seed: {v} (the {split} data's shuffle order and random maps follow the seed)"
            )),
            (Some(old), None) if old != fp && data.is_empty() => {
                let shards = |f: &str| {
                    let (whole, n) = f.split_once("/file-shards-").unwrap_or((f, "1"));
                    (whole.to_string(), n.to_string())
                };
                let ((was, n_was), (now, n_now)) = (shards(old), shards(fp));
                data.push(if was == now {
                    format!(
                        "  the {split} data: the workers of the job read it file by file \
                         (auto_shard_policy), and their number changed ({n_was} -> {n_now} \
                         readers), so each reads other files than the checkpoint's"
                    )
                } else {
                    format!(
                        "  the {split} data: the files or the pipeline it reads changed (fingerprint {old} -> {fp})"
                    )
                });
            }
            _ => {}
        }
    }
    data
}

/// True when `key` is `prefix` or a key inside it (`model.layers[0]`, `data.train`).
fn under(key: &str, prefix: &str) -> bool {
    key == prefix
        || key.starts_with(&format!("{prefix}."))
        || key.starts_with(&format!("{prefix}["))
}
