//! What a study shows: the live table (one line per finished trial), the summary of the best
//! trials, and `best.toml`.

use std::path::Path;

use crate::config::TuneConfig;
use crate::error::TuneError;
use crate::storage::StoredTrial;
use crate::trial::{Direction, Params, TrialState, Value};

/// A value as the table prints it: integers and strings as they are, floats with up to 4
/// decimals (scientific, 4 significant digits, below 1e-3 and from 1e5).
pub fn format_value(v: &Value) -> String {
    match v {
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Str(s) => s.clone(),
        Value::Float(f) => format_float(*f),
    }
}

fn format_float(f: f64) -> String {
    if f != 0.0 && (f.abs() < 1e-3 || f.abs() >= 1e5) {
        format!("{f:.3e}")
    } else {
        let s = format!("{f:.4}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        if s.is_empty() || s == "-" {
            "0".into()
        } else {
            s.into()
        }
    }
}

/// `name=value` pairs.
pub fn format_params(p: &Params) -> String {
    p.iter()
        .map(|(k, v)| format!("{k}={}", format_value(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The table's header for an objective named `objective`.
pub fn header(objective: &str) -> String {
    format!(
        "{:>5}  {:<8}  {:>w$}  {:>8}  parameters",
        "trial",
        "state",
        objective,
        "duration",
        w = objective.len().max(9)
    )
}

/// One table line for `t`.
pub fn line(t: &StoredTrial, objective: &str) -> String {
    let value = t
        .record
        .value
        .map(|v| format!("{v:.4}"))
        .unwrap_or_else(|| "-".into());
    let duration = match (t.started_ms, t.finished_ms) {
        (Some(s), Some(f)) if f >= s => format!("{:.1}s", (f - s) as f64 / 1000.0),
        _ => "-".into(),
    };
    let mut params = format_params(&t.record.plan.params);
    if let Some(from) = t.record.plan.resume_from {
        params += &format!(" (from trial {from}, {} epochs)", t.record.plan.epochs);
    }
    if t.record.retries > 0 {
        params += &format!(" [retry {}]", t.record.retries);
    }
    format!(
        "{:>5}  {:<8}  {:>w$}  {:>8}  {params}",
        t.record.number,
        t.state_name(),
        value,
        duration,
        w = objective.len().max(9)
    )
}

/// The complete trials, best first.
pub fn ranked(trials: &[StoredTrial], direction: Direction) -> Vec<&StoredTrial> {
    let mut done: Vec<&StoredTrial> = trials
        .iter()
        .filter(|t| t.record.state == TrialState::Complete && !t.waiting)
        .filter(|t| t.record.value.is_some_and(f64::is_finite))
        .collect();
    done.sort_by(|a, b| {
        let (x, y) = (a.record.value.unwrap(), b.record.value.unwrap());
        let o = x.total_cmp(&y);
        let o = if direction == Direction::Max {
            o.reverse()
        } else {
            o
        };
        o.then(a.record.number.cmp(&b.record.number))
    });
    done
}

/// `kiln tune --summary`: the counts by state and the `n` best trials.
pub fn summary(trials: &[StoredTrial], cfg: &TuneConfig, n: usize, location: &str) -> String {
    let count = |s: &str| trials.iter().filter(|t| t.state_name() == s).count();
    let mut out = format!(
        "Study \"{}\" in {location}: {} trial{} ({} complete, {} pruned, {} failed, {} running, \
         {} waiting); objective {} ({})\n",
        cfg.settings.study_name,
        trials.len(),
        if trials.len() == 1 { "" } else { "s" },
        count("complete"),
        count("pruned"),
        count("failed"),
        count("running"),
        count("waiting"),
        cfg.objective.name,
        match cfg.objective.direction {
            Direction::Max => "max",
            Direction::Min => "min",
        }
    );
    let best = ranked(trials, cfg.objective.direction);
    if best.is_empty() {
        out += "No complete trial yet.\n";
        return out;
    }
    out += &format!(
        "Best {} trial{}:\n",
        best.len().min(n),
        if n == 1 { "" } else { "s" }
    );
    out += &header(&cfg.objective.name);
    out.push('\n');
    for t in best.into_iter().take(n) {
        out += &line(t, &cfg.objective.name);
        out.push('\n');
    }
    out
}

/// Writes the best complete trial's run config to `path` (atomically), ready for
/// `kiln train`: the base config, the overrides and the trial's parameters, without the
/// tuner's callbacks, its `name` suffixed with `-best`. Returns the trial written, if any.
///
/// # Errors
/// [`TuneError::Io`]; [`TuneError::Config`] as [`TuneConfig::run_config`].
pub fn write_best<'a>(
    trials: &'a [StoredTrial],
    cfg: &TuneConfig,
    path: &Path,
) -> Result<Option<&'a StoredTrial>, TuneError> {
    let Some(best) = ranked(trials, cfg.objective.direction).into_iter().next() else {
        return Ok(None);
    };
    let mut table = cfg.run_config(&best.record.plan, 0)?;
    // Its own run directory (runs/<name>-best): a run of the base config in runs/<name> is
    // neither resumed nor refused.
    if let Some(toml::Value::String(name)) = table.get_mut("name") {
        name.push_str("-best");
    }
    let text = format!(
        "# The best trial of study \"{}\" ({}): trial {}, {} = {}\n# {}\n# Train it: kiln train {}\n{}",
        cfg.settings.study_name,
        cfg.path.display(),
        best.record.number,
        cfg.objective.name,
        best.record.value.map(|v| v.to_string()).unwrap_or_default(),
        format_params(&best.record.plan.params),
        path.display(),
        toml::to_string_pretty(&table)
            .map_err(|e| TuneError::Io(format!("cannot write the best config as TOML: {e}")))?
    );
    write_atomic(path, text.as_bytes())?;
    Ok(Some(best))
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`. The
/// temporary name is the writer's own (process id and a count), so that writers of one
/// file never rename each other's half-written files.
///
/// # Errors
/// [`TuneError::Io`] naming the file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TuneError> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| TuneError::io("create", dir, e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| TuneError::io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| TuneError::io("write", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_with_four_decimals_or_scientific() {
        assert_eq!(format_float(0.001234567), "0.0012");
        assert_eq!(format_float(0.0001234), "1.234e-4");
        assert_eq!(format_float(0.5), "0.5");
        assert_eq!(format_float(128.0), "128");
        assert_eq!(format_float(0.0), "0");
    }
}
