//! Command-line overrides of a config's values (`kiln train --epochs`, `--batch-size`, ...),
//! applied to the raw config before anything is resolved.

use std::path::PathBuf;

use super::RunConfig;
use crate::error::{KilnError, Result};

/// Command-line overrides of config values.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `fit.epochs`.
    pub epochs: Option<usize>,
    /// `fit.batch_size`.
    pub batch_size: Option<usize>,
    /// `seed`.
    pub seed: Option<u64>,
    /// `data.data_dir`.
    pub data_dir: Option<PathBuf>,
    /// `precision` (`kiln train --precision`).
    pub precision: Option<crate::precision::Precision>,
}

impl RunConfig {
    /// Applies overrides and re-checks the values.
    ///
    /// # Errors
    /// [`KilnError::Config`] naming the flag when a value is out of range.
    pub fn apply(&mut self, o: &Overrides) -> Result<()> {
        // Checked here so that the message names the flag, not the config file's key.
        for (flag, value) in [("--epochs", o.epochs), ("--batch-size", o.batch_size)] {
            if value == Some(0) {
                return Err(KilnError::config(flag, "must be at least 1"));
            }
        }
        if let Some(v) = o.epochs {
            self.fit.epochs = v;
        }
        if let Some(v) = o.batch_size {
            self.fit.batch_size = v;
            // The flag wins over the pipeline tables' own batch sizes, too.
            for p in [
                &mut self.data.train,
                &mut self.data.validation,
                &mut self.data.test,
            ]
            .into_iter()
            .flatten()
            {
                if p.batch_size.is_some() {
                    p.batch_size = Some(v);
                }
            }
        }
        if let Some(v) = o.seed {
            self.seed = v;
        }
        if let Some(v) = &o.data_dir {
            self.data.data_dir = v.clone();
        }
        if let Some(p) = o.precision {
            self.set_precision(p);
        }
        self.fit.validate()
    }
}
