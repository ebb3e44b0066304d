//! Model versions: which are on disk, which are loaded, and hot reload.
//!
//! Each model's base path holds numbered version directories (`<base>/1/`, `<base>/2/`, …, as
//! TF Serving reads them). [`Registry::poll`] scans them (the server calls it every
//! `poll_interval`), loads the versions the policy wants, and only then unloads the ones it
//! no longer wants, so a request always finds a loaded version while a new one loads
//! (requests already running on an unloaded version finish on it: they hold it).
//!
//! A version that fails to load (missing or corrupt files) is reported in the status with its
//! error and is left out of the policy's choice, so it never replaces a working version; it is
//! tried again when its files change. Only real directories named by a version number are
//! read (no symbolic links), and in them only the fixed file names of
//! [`kiln::export`]: no file outside the base path is ever opened.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use burn::prelude::Device;
use kiln::export::{MODEL_SPEC_FILE, SIGNATURE_FILE, Servable, WEIGHTS_FILE, parse_version};

use crate::config::{ModelConfig, VersionPolicy};
use crate::error::ApiError;
use crate::metrics::Metrics;

/// A version's state, with TF Serving's names (`ModelVersionStatus.State`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Seen, not loaded yet.
    Start,
    /// Loading.
    Loading,
    /// Serving requests.
    Available,
    /// Being unloaded.
    Unloading,
    /// Unloaded, or failed to load (then with an error).
    End,
}

impl State {
    /// TF Serving's name (`AVAILABLE`, …).
    pub fn name(self) -> &'static str {
        match self {
            State::Start => "START",
            State::Loading => "LOADING",
            State::Available => "AVAILABLE",
            State::Unloading => "UNLOADING",
            State::End => "END",
        }
    }
}

/// What the status endpoint reports for one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionStatus {
    /// The version number.
    pub version: u64,
    /// Its state.
    pub state: State,
    /// Why it failed to load, if it did.
    pub error: Option<String>,
}

/// Which version a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The newest available version.
    Latest,
    /// A version number.
    Version(u64),
    /// A version label from the config.
    Label(String),
}

/// Sizes and modification times of a version directory and its files: a changed fingerprint
/// means a failed version is worth loading again.
type Fingerprint = Vec<(u64, Option<SystemTime>)>;

fn fingerprint(dir: &Path) -> Fingerprint {
    let stat = |p: PathBuf| {
        std::fs::symlink_metadata(p)
            .map(|m| (m.len(), m.modified().ok()))
            .unwrap_or((0, None))
    };
    let mut out = vec![stat(dir.to_path_buf())];
    for f in [WEIGHTS_FILE, MODEL_SPEC_FILE, SIGNATURE_FILE] {
        out.push(stat(dir.join(f)));
    }
    out
}

struct Version {
    state: State,
    servable: Option<Arc<Servable>>,
    error: Option<String>,
    /// The fingerprint of a failed load.
    failed: Option<Fingerprint>,
}

struct Model {
    config: ModelConfig,
    versions: BTreeMap<u64, Version>,
}

/// The served models and their versions.
pub struct Registry {
    models: RwLock<BTreeMap<String, Model>>,
    device: Device,
    metrics: Arc<Metrics>,
    log: fn(&str),
}

/// The version directories under `base`: real directories (not links) named by a version
/// number.
fn versions_on_disk(base: &Path) -> BTreeSet<u64> {
    let Ok(entries) = std::fs::read_dir(base) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| parse_version(&e.file_name().to_string_lossy()))
        .collect()
}

fn wanted(policy: &VersionPolicy, candidates: &BTreeSet<u64>) -> BTreeSet<u64> {
    match policy {
        VersionPolicy::Latest(n) => candidates.iter().rev().take(*n).copied().collect(),
        VersionPolicy::All => candidates.clone(),
        VersionPolicy::Specific(v) => v
            .iter()
            .filter(|v| candidates.contains(v))
            .copied()
            .collect(),
    }
}

impl Registry {
    /// A registry for `models`, loading onto `device`; `log` prints load and unload events.
    pub fn new(
        models: &[ModelConfig],
        device: Device,
        metrics: Arc<Metrics>,
        log: fn(&str),
    ) -> Registry {
        let models = models
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    Model {
                        config: c.clone(),
                        versions: BTreeMap::new(),
                    },
                )
            })
            .collect();
        Registry {
            models: RwLock::new(models),
            device,
            metrics,
            log,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Model>> {
        self.models.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Model>> {
        self.models.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Scans every model's base path once: loads wanted versions, then unloads unwanted
    /// ones (see the module docs). Loading happens without holding the registry's lock, so
    /// requests keep being served meanwhile.
    pub fn poll(&self) {
        let names: Vec<String> = self.read().keys().cloned().collect();
        for name in names {
            self.poll_model(&name);
        }
    }

    /// The versions to load now, and the candidates (on disk, not failed as they are).
    fn plan(&self, name: &str) -> Option<(PathBuf, BTreeSet<u64>, BTreeSet<u64>)> {
        let models = self.read();
        let model = models.get(name)?;
        let base = model.config.base_path.clone();
        let on_disk = versions_on_disk(&base);
        let candidates: BTreeSet<u64> = on_disk
            .iter()
            .copied()
            .filter(
                |v| match model.versions.get(v).and_then(|e| e.failed.as_ref()) {
                    Some(fp) => *fp != fingerprint(&base.join(v.to_string())),
                    None => true,
                },
            )
            .collect();
        let want = wanted(&model.config.version_policy, &candidates);
        Some((base, on_disk, want))
    }

    fn poll_model(&self, name: &str) {
        let Some((base, _, want)) = self.plan(name) else {
            return;
        };
        for v in want {
            let needs_load = {
                let mut models = self.write();
                let Some(model) = models.get_mut(name) else {
                    return;
                };
                let entry = model.versions.entry(v).or_insert(Version {
                    state: State::Start,
                    servable: None,
                    error: None,
                    failed: None,
                });
                if entry.state == State::Available {
                    false
                } else {
                    entry.state = State::Loading;
                    true
                }
            };
            if !needs_load {
                continue;
            }
            let dir = base.join(v.to_string());
            let fp = fingerprint(&dir);
            let loaded = Servable::load(&dir, self.device.clone());
            let mut models = self.write();
            let Some(model) = models.get_mut(name) else {
                return;
            };
            let entry = model.versions.get_mut(&v).expect("inserted above");
            match loaded {
                Ok(s) => {
                    (self.log)(&format!(
                        "kiln serve: model {name} version {v} is AVAILABLE"
                    ));
                    entry.state = State::Available;
                    entry.servable = Some(Arc::new(s));
                    entry.error = None;
                    entry.failed = None;
                }
                Err(e) => {
                    (self.log)(&format!(
                        "kiln serve: model {name} version {v} failed to load: {e}"
                    ));
                    entry.state = State::End;
                    entry.servable = None;
                    entry.error = Some(e.to_string());
                    entry.failed = Some(fp);
                }
            }
        }
        // Unload only what the policy no longer wants among what loaded fine; a version that
        // failed above is not a candidate any more, so the working one it would have replaced
        // stays.
        let Some((_, on_disk, want)) = self.plan(name) else {
            return;
        };
        let mut models = self.write();
        let Some(model) = models.get_mut(name) else {
            return;
        };
        let all_wanted_up = want.iter().all(|v| {
            model
                .versions
                .get(v)
                .is_some_and(|e| e.state == State::Available)
        });
        for (v, entry) in model.versions.iter_mut() {
            if entry.state == State::Available && !want.contains(v) && all_wanted_up {
                (self.log)(&format!("kiln serve: model {name} version {v} unloaded"));
                entry.state = State::End;
                entry.servable = None;
            }
        }
        // Forget versions whose directory is gone and that serve nothing.
        model
            .versions
            .retain(|v, e| on_disk.contains(v) || e.state == State::Available);
        let available = model
            .versions
            .values()
            .filter(|e| e.state == State::Available)
            .count();
        self.metrics.available(name, available);
    }

    /// The servable a request for `name` with `selector` runs on, and its version.
    ///
    /// # Errors
    /// 404 for an unknown model, version or label; 503 when the model (or the version asked
    /// for) has no loaded version, with the reason.
    pub fn resolve(
        &self,
        name: &str,
        selector: &Selector,
    ) -> Result<(u64, Arc<Servable>), ApiError> {
        let models = self.read();
        let model = models.get(name).ok_or_else(|| {
            ApiError::not_found(format!(
                "Servable not found for request: Latest({name}): no model named {name:?} is served"
            ))
        })?;
        let version = match selector {
            Selector::Latest => {
                let newest = model
                    .versions
                    .iter()
                    .rev()
                    .find(|(_, e)| e.state == State::Available);
                return match newest {
                    Some((v, e)) => Ok((*v, e.servable.clone().expect("available has one"))),
                    None => Err(ApiError::unavailable(format!(
                        "no version of model {name:?} is loaded{}",
                        failures(model)
                    ))),
                };
            }
            Selector::Version(v) => *v,
            Selector::Label(l) => *model.config.version_labels.get(l).ok_or_else(|| {
                ApiError::not_found(format!(
                    "Servable not found for request: label {l:?} of model {name:?} is not defined"
                ))
            })?,
        };
        match model.versions.get(&version) {
            Some(e) if e.state == State::Available => {
                Ok((version, e.servable.clone().expect("available has one")))
            }
            Some(e) => Err(ApiError::unavailable(format!(
                "version {version} of model {name:?} is not available (state {}){}",
                e.state.name(),
                e.error
                    .as_ref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ))),
            None => Err(ApiError::not_found(format!(
                "Servable not found for request: Specific({name}, {version})"
            ))),
        }
    }

    /// Status of every known version of `name` (newest first), or of one.
    ///
    /// # Errors
    /// 404 for an unknown model or version, or a model with no version directory.
    pub fn status(&self, name: &str, selector: &Selector) -> Result<Vec<VersionStatus>, ApiError> {
        let models = self.read();
        let model = models.get(name).ok_or_else(|| {
            ApiError::not_found(format!("Could not find any versions of model {name}"))
        })?;
        let one = match selector {
            Selector::Latest => None,
            Selector::Version(v) => Some(*v),
            Selector::Label(l) => Some(*model.config.version_labels.get(l).ok_or_else(|| {
                ApiError::not_found(format!("label {l:?} of model {name:?} is not defined"))
            })?),
        };
        let list: Vec<VersionStatus> = model
            .versions
            .iter()
            .rev()
            .filter(|(v, _)| one.is_none_or(|o| o == **v))
            .map(|(v, e)| VersionStatus {
                version: *v,
                state: e.state,
                error: e.error.clone(),
            })
            .collect();
        if list.is_empty() {
            return Err(ApiError::not_found(match one {
                Some(v) => format!("Servable not found for request: Specific({name}, {v})"),
                None => format!(
                    "Could not find any versions of model {name} under {}",
                    model.config.base_path.display()
                ),
            }));
        }
        Ok(list)
    }

    /// Whether `name` is one of the configured models (loaded or not).
    pub fn serves(&self, name: &str) -> bool {
        self.read().contains_key(name)
    }

    /// True when every model has an available version.
    pub fn ready(&self) -> bool {
        self.read()
            .values()
            .all(|m| m.versions.values().any(|e| e.state == State::Available))
    }
}

/// `: version 3 failed to load: …` for a model's failed versions.
fn failures(model: &Model) -> String {
    let msgs: Vec<String> = model
        .versions
        .iter()
        .filter_map(|(v, e)| {
            e.error
                .as_ref()
                .map(|m| format!("version {v} failed to load: {m}"))
        })
        .collect();
    if msgs.is_empty() {
        format!(
            " (no loadable version directory under {})",
            model.config.base_path.display()
        )
    } else {
        format!(": {}", msgs.join("; "))
    }
}
