//! Server settings: the models to serve, request batching, limits.
//!
//! Names follow TF Serving's flags and config protos: `--model_name` / `--model_base_path`
//! (one model), a model config file with several models (`ModelServerConfig`'s `name`,
//! `base_path`, `model_version_policy`, `version_labels`; kiln reads it as TOML), and the
//! batching parameters file (`BatchingParameters` in protobuf text format, as
//! `--batching_parameters_file` takes it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::ServeError;

/// Which versions of a model are served (TF Serving's `ServableVersionPolicy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionPolicy {
    /// The `n` largest version numbers (TF Serving's default: `latest { num_versions: 1 }`).
    Latest(usize),
    /// Every version directory.
    All,
    /// These versions only.
    Specific(Vec<u64>),
}

impl Default for VersionPolicy {
    fn default() -> VersionPolicy {
        VersionPolicy::Latest(1)
    }
}

/// One served model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The name clients use (`/v1/models/<name>`); checked with
    /// [`kiln::export::check_model_name`].
    pub name: String,
    /// The directory holding the numbered version directories (`<base_path>/1/`, …).
    pub base_path: PathBuf,
    /// Which versions to load.
    pub version_policy: VersionPolicy,
    /// Labels for versions (`/v1/models/<name>/labels/<label>`), e.g. `stable = 1`.
    pub version_labels: BTreeMap<String, u64>,
}

impl ModelConfig {
    /// A model served with the default policy (latest version) and no labels.
    pub fn new(name: impl Into<String>, base_path: impl Into<PathBuf>) -> ModelConfig {
        ModelConfig {
            name: name.into(),
            base_path: base_path.into(),
            version_policy: VersionPolicy::default(),
            version_labels: BTreeMap::new(),
        }
    }
}

/// Request batching (TF Serving's `BatchingParameters`): requests for the same model version
/// are merged into one forward pass of up to `max_batch_size` examples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchingConfig {
    /// Most examples in one batch. A request with more examples runs as its own batch.
    pub max_batch_size: usize,
    /// How long a batch waits for more requests after its first one, in microseconds (0: a
    /// batch runs as soon as a batch thread is free; under load, requests queue up meanwhile
    /// and the next batch takes them all).
    pub batch_timeout_micros: u64,
    /// Most batches waiting in the queue; a request that would open one more gets 429.
    pub max_enqueued_batches: usize,
    /// Threads running batches (each forward pass also uses Burn's CPU thread pool).
    pub num_batch_threads: usize,
}

impl Default for BatchingConfig {
    /// `max_batch_size` 64, `batch_timeout_micros` 0, `max_enqueued_batches` 100,
    /// `num_batch_threads` 1. (TF Serving's defaults are 1000, 0, 1000000 and the number of
    /// CPUs; kiln bounds the queue tighter so that overload gives 429s rather than
    /// latencies of minutes, and runs one batch at a time because each forward pass is
    /// already multi-threaded: requests that arrive meanwhile make the next batch larger.)
    fn default() -> BatchingConfig {
        BatchingConfig {
            max_batch_size: 64,
            batch_timeout_micros: 0,
            max_enqueued_batches: 100,
            num_batch_threads: 1,
        }
    }
}

impl BatchingConfig {
    /// `batch_timeout_micros` as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_micros(self.batch_timeout_micros)
    }

    /// Checks that every value is positive (the timeout may be 0).
    ///
    /// # Errors
    /// [`ServeError::Config`] naming the parameter.
    pub fn validate(&self) -> Result<(), ServeError> {
        for (key, v) in [
            ("max_batch_size", self.max_batch_size),
            ("max_enqueued_batches", self.max_enqueued_batches),
            ("num_batch_threads", self.num_batch_threads),
        ] {
            if v == 0 {
                return Err(ServeError::config(key, "must be at least 1"));
            }
        }
        check_threads("num_batch_threads", self.num_batch_threads)
    }

    /// Reads TF Serving's batching parameters file (protobuf text format of
    /// `BatchingParameters`, `tensorflow_serving/servables/tensorflow/
    /// session_bundle_config.proto`), e.g.
    ///
    /// ```text
    /// max_batch_size { value: 128 }
    /// batch_timeout_micros { value: 1000 }
    /// max_enqueued_batches { value: 100 }
    /// num_batch_threads { value: 4 }
    /// ```
    ///
    /// Absent parameters keep [`BatchingConfig::default`]'s values. `#` starts a comment.
    ///
    /// # Errors
    /// [`ServeError::Config`] naming the file and the parameter for an unknown parameter or a
    /// value that is not a non-negative integer.
    pub fn from_text_proto(text: &str, file: &Path) -> Result<BatchingConfig, ServeError> {
        let mut cfg = BatchingConfig::default();
        let clean: String = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(" ");
        // Tokens: words, numbers, and the punctuation `{`, `}`, `:`.
        let spaced = clean
            .replace('{', " { ")
            .replace('}', " } ")
            .replace(':', " : ");
        let tokens: Vec<&str> = spaced.split_whitespace().collect();
        let bad = |message: String| ServeError::Config {
            key: file.display().to_string(),
            message,
        };
        let mut i = 0;
        while i < tokens.len() {
            let key = tokens[i];
            let value = match tokens.get(i + 1..i + 6) {
                Some(["{", "value", ":", v, "}"]) => *v,
                Some([":", v, ..]) if key != "{" => {
                    // `key: N` without the wrapper, as some configs write it.
                    i += 3;
                    assign(&mut cfg, key, v, &bad)?;
                    continue;
                }
                _ => {
                    return Err(bad(format!(
                        "cannot parse near `{key}`: expected `name {{ value: N }}`"
                    )));
                }
            };
            assign(&mut cfg, key, value, &bad)?;
            i += 6;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

fn assign(
    cfg: &mut BatchingConfig,
    key: &str,
    value: &str,
    bad: &dyn Fn(String) -> ServeError,
) -> Result<(), ServeError> {
    let n: u64 = value
        .parse()
        .map_err(|_| bad(format!("`{key}`: {value:?} is not a non-negative integer")))?;
    match key {
        "max_batch_size" => cfg.max_batch_size = n as usize,
        "batch_timeout_micros" => cfg.batch_timeout_micros = n,
        "max_enqueued_batches" => cfg.max_enqueued_batches = n as usize,
        "num_batch_threads" => cfg.num_batch_threads = n as usize,
        other => {
            return Err(bad(format!(
                "unknown batching parameter `{other}`; kiln knows max_batch_size, \
                 batch_timeout_micros, max_enqueued_batches, num_batch_threads"
            )));
        }
    }
    Ok(())
}

/// Everything `kiln serve` needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to bind (default `127.0.0.1`: only this machine).
    pub host: String,
    /// REST port (TF Serving's `--rest_api_port`, default 8501; 0 picks a free port).
    pub port: u16,
    /// The models.
    pub models: Vec<ModelConfig>,
    /// Request batching; `None` runs each request as its own forward pass.
    pub batching: Option<BatchingConfig>,
    /// Threads running requests when batching is off (default: the number of CPUs, at most 8).
    pub num_request_threads: usize,
    /// Requests waiting for a thread when batching is off before new ones get 429.
    pub max_enqueued_requests: usize,
    /// Largest request body in bytes (default 32 MiB); larger bodies get 413.
    pub max_body_bytes: usize,
    /// A bearer token every `/v1` and `/monitoring` request must carry
    /// (`Authorization: Bearer <token>`), or none.
    pub auth_token: Option<String>,
    /// How often the base paths are scanned for new versions (TF Serving's
    /// `--file_system_poll_wait_seconds`, default 1 s).
    pub poll_interval: Duration,
    /// Where inference runs.
    pub device: kiln::DeviceKind,
    /// How long a connection may take to send a request's head (request line and headers),
    /// and how long an idle keep-alive connection stays open (default 30 s). Past it the
    /// connection is closed.
    pub header_read_timeout: Duration,
    /// How long a request body may stall: the longest wait for its next bytes (default 60 s).
    /// Past it the client gets 408 and the connection is closed.
    pub body_read_timeout: Duration,
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig {
            host: "127.0.0.1".into(),
            port: 8501,
            models: Vec::new(),
            batching: None,
            num_request_threads: std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .min(8),
            max_enqueued_requests: 1000,
            max_body_bytes: 32 << 20,
            auth_token: None,
            poll_interval: Duration::from_secs(1),
            device: kiln::DeviceKind::Cpu,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60),
        }
    }
}

impl ServeConfig {
    /// Checks names, labels and limits.
    ///
    /// # Errors
    /// [`ServeError::Config`] naming the model and the setting.
    pub fn validate(&self) -> Result<(), ServeError> {
        if self.models.is_empty() {
            return Err(ServeError::config(
                "--model-name",
                "no model to serve: pass --model-name and --model-base-path, or --model-config-file",
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for m in &self.models {
            kiln::export::check_model_name(&m.name)
                .map_err(|e| ServeError::config("--model-name", e))?;
            if !seen.insert(&m.name) {
                return Err(ServeError::config(
                    format!("models.{}", m.name),
                    "the model is listed twice",
                ));
            }
            for label in m.version_labels.keys() {
                check_label(label).map_err(|e| {
                    ServeError::config(format!("models.{}.version_labels", m.name), e)
                })?;
            }
            match &m.version_policy {
                VersionPolicy::Latest(0) => {
                    return Err(ServeError::config(
                        format!("models.{}.model_version_policy", m.name),
                        "latest needs at least 1 version",
                    ));
                }
                VersionPolicy::Specific(v) if v.is_empty() || v.contains(&0) => {
                    return Err(ServeError::config(
                        format!("models.{}.model_version_policy", m.name),
                        "specific needs a list of version numbers >= 1",
                    ));
                }
                _ => {}
            }
        }
        if let Some(b) = &self.batching {
            b.validate()?;
        }
        for (key, v) in [
            ("header_read_timeout", self.header_read_timeout),
            ("body_read_timeout", self.body_read_timeout),
        ] {
            if v.is_zero() || v > Duration::from_secs(86_400) {
                return Err(ServeError::config(
                    key,
                    format!("{v:?}: must be more than 0 and at most 86400 s"),
                ));
            }
        }
        for (key, v) in [
            ("num_request_threads", self.num_request_threads),
            ("max_enqueued_requests", self.max_enqueued_requests),
            ("max_body_bytes", self.max_body_bytes),
        ] {
            if v == 0 {
                return Err(ServeError::config(key, "must be at least 1"));
            }
        }
        check_threads("num_request_threads", self.num_request_threads)
    }

    /// Reads the models of a model config file (TOML):
    ///
    /// ```toml
    /// [[models]]
    /// name = "fashion-cnn"
    /// base_path = "exports/fashion-cnn"        # relative to the config file's directory
    /// model_version_policy = { latest = 2 }    # or "all", or { specific = [1, 3] }
    /// version_labels = { stable = 1, canary = 2 }
    /// ```
    ///
    /// # Errors
    /// [`ServeError::Config`] naming the file and the key.
    pub fn models_from_toml(path: &Path) -> Result<Vec<ModelConfig>, ServeError> {
        let text = std::fs::read_to_string(path).map_err(|e| ServeError::Config {
            key: path.display().to_string(),
            message: format!("cannot read the model config file: {e}"),
        })?;
        let err = |key: String, message: String| ServeError::Config {
            key: format!("{}: {key}", path.display()),
            message,
        };
        let table: toml::Table =
            toml::from_str(&text).map_err(|e| err("models".into(), e.message().to_string()))?;
        if let Some(k) = table.keys().find(|k| k.as_str() != "models") {
            return Err(err(
                k.clone(),
                "unknown key; the file holds `[[models]]`".into(),
            ));
        }
        let list = table
            .get("models")
            .and_then(|m| m.as_array())
            .ok_or_else(|| err("models".into(), "missing: add [[models]] tables".into()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut out = Vec::new();
        for (i, m) in list.iter().enumerate() {
            let key = |k: &str| format!("models[{i}].{k}");
            let t = m
                .as_table()
                .ok_or_else(|| err(format!("models[{i}]"), "must be a table".into()))?;
            for k in t.keys() {
                if ![
                    "name",
                    "base_path",
                    "model_version_policy",
                    "version_labels",
                    "model_platform",
                ]
                .contains(&k.as_str())
                {
                    return Err(err(key(k), "unknown key".into()));
                }
            }
            let name = t
                .get("name")
                .and_then(|v| v.as_str())
                .ok_or_else(|| err(key("name"), "missing (a string)".into()))?;
            let base = t
                .get("base_path")
                .and_then(|v| v.as_str())
                .ok_or_else(|| err(key("base_path"), "missing (a directory)".into()))?;
            let mut cfg = ModelConfig::new(name, dir.join(base));
            if let Some(p) = t.get("model_version_policy") {
                cfg.version_policy =
                    parse_policy(p).map_err(|m| err(key("model_version_policy"), m))?;
            }
            if let Some(l) = t.get("version_labels") {
                let l = l.as_table().ok_or_else(|| {
                    err(
                        key("version_labels"),
                        "must be a table label = version".into(),
                    )
                })?;
                for (label, v) in l {
                    let v = v.as_integer().filter(|&v| v >= 1).ok_or_else(|| {
                        err(
                            key(&format!("version_labels.{label}")),
                            "must be a version number >= 1".into(),
                        )
                    })?;
                    cfg.version_labels.insert(label.clone(), v as u64);
                }
            }
            out.push(cfg);
        }
        Ok(out)
    }
}

fn parse_policy(v: &toml::Value) -> Result<VersionPolicy, String> {
    let usage = "use \"all\", { latest = N } or { specific = [versions] }";
    match v {
        toml::Value::String(s) if s == "all" => Ok(VersionPolicy::All),
        toml::Value::String(s) if s == "latest" => Ok(VersionPolicy::Latest(1)),
        toml::Value::Table(t) if t.len() == 1 => {
            if let Some(n) = t.get("latest") {
                let n = n
                    .as_integer()
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| format!("latest must be a number >= 1; {usage}"))?;
                return Ok(VersionPolicy::Latest(n as usize));
            }
            if let Some(list) = t.get("specific") {
                let list = list
                    .as_array()
                    .ok_or_else(|| format!("specific must be a list; {usage}"))?;
                let versions = list
                    .iter()
                    .map(|v| v.as_integer().filter(|&v| v >= 1).map(|v| v as u64))
                    .collect::<Option<Vec<u64>>>()
                    .ok_or_else(|| format!("specific versions must be numbers >= 1; {usage}"))?;
                return Ok(VersionPolicy::Specific(versions));
            }
            Err(usage.to_string())
        }
        _ => Err(usage.to_string()),
    }
}

/// Checks a version label: 1 to 64 characters from `[A-Za-z0-9_.-]`, not a number (TF
/// Serving refuses labels that could be read as versions) and without `..`.
///
/// # Errors
/// A message saying what is wrong.
pub fn check_label(label: &str) -> Result<(), String> {
    if label.is_empty() || label.len() > 64 {
        return Err(format!("label {label:?} must have 1 to 64 characters"));
    }
    if label.contains("..")
        || !label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        return Err(format!(
            "label {label:?} may only use letters, digits, '_', '.' and '-' (no \"..\")"
        ));
    }
    if label.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("label {label:?} must not be a number"));
    }
    Ok(())
}

/// A thread count the server starts at once: at most 16 per core (at least 256). More only
/// adds switching, and past the system's limits a thread cannot even get its stack.
fn check_threads(key: &str, n: usize) -> Result<(), ServeError> {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let max = (16 * cores).max(256);
    if n > max {
        return Err(ServeError::config(
            key,
            format!("{n} threads is more than the {max} allowed here (16 per core, at least 256)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batching_parameters_file_in_tf_servings_text_format() {
        let text = "# TF Serving batching\nmax_batch_size { value: 128 }\n\
                    batch_timeout_micros{value:500}\nnum_batch_threads { value: 4 }\n";
        let cfg = BatchingConfig::from_text_proto(text, Path::new("b.txt")).unwrap();
        assert_eq!(
            cfg,
            BatchingConfig {
                max_batch_size: 128,
                batch_timeout_micros: 500,
                max_enqueued_batches: 100,
                num_batch_threads: 4
            }
        );
        let e = BatchingConfig::from_text_proto("allowed_batch_sizes { value: 8 }", Path::new("b"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown batching parameter"), "{e}");
        let e = BatchingConfig::from_text_proto("max_batch_size { value: -1 }", Path::new("b"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("non-negative integer"), "{e}");
        let e = BatchingConfig::from_text_proto("max_batch_size { value: 0 }", Path::new("b"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_batch_size"), "{e}");
    }

    #[test]
    fn thread_counts_a_machine_cannot_start_are_refused() {
        check_threads("num_request_threads", 256).unwrap();
        let e = check_threads("num_request_threads", 1_000_000)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("num_request_threads") && e.contains("1000000 threads"),
            "{e}"
        );
        let b = BatchingConfig {
            num_batch_threads: 20_000,
            ..BatchingConfig::default()
        };
        assert!(
            b.validate()
                .unwrap_err()
                .to_string()
                .contains("num_batch_threads")
        );
    }

    #[test]
    fn model_config_file() {
        let dir = std::env::temp_dir().join(format!("kiln-serve-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("models.toml");
        std::fs::write(
            &path,
            "[[models]]\nname = \"a\"\nbase_path = \"exports/a\"\n\
             model_version_policy = { latest = 2 }\nversion_labels = { stable = 1 }\n\
             [[models]]\nname = \"b\"\nbase_path = \"/abs/b\"\nmodel_version_policy = { specific = [3, 1] }\n",
        )
        .unwrap();
        let models = ServeConfig::models_from_toml(&path).unwrap();
        assert_eq!(models[0].base_path, dir.join("exports/a"));
        assert_eq!(models[0].version_policy, VersionPolicy::Latest(2));
        assert_eq!(models[0].version_labels["stable"], 1);
        assert_eq!(models[1].base_path, PathBuf::from("/abs/b"));
        assert_eq!(
            models[1].version_policy,
            VersionPolicy::Specific(vec![3, 1])
        );
        std::fs::write(
            &path,
            "[[models]]\nname = \"a\"\nbase_path = \"x\"\nfoo = 1\n",
        )
        .unwrap();
        let e = ServeConfig::models_from_toml(&path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("models[0].foo"), "{e}");
    }

    #[test]
    fn labels_and_names_are_checked() {
        assert!(check_label("stable").is_ok());
        for bad in ["", "12", "a/b", "..", "a b"] {
            assert!(check_label(bad).is_err(), "{bad:?}");
        }
        let mut cfg = ServeConfig {
            models: vec![ModelConfig::new("../x", "/tmp")],
            ..Default::default()
        };
        assert!(cfg.validate().is_err());
        cfg.models = vec![
            ModelConfig::new("ok", "/tmp"),
            ModelConfig::new("ok", "/tmp"),
        ];
        assert!(cfg.validate().unwrap_err().to_string().contains("twice"));
    }
}
