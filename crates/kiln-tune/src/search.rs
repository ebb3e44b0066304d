//! Where the study gets its oracle and pruner: [`crate::oracle::build`] and
//! [`crate::pruner::build`] from the tune config's `[tuner]` table and search space.

use crate::config::TuneConfig;
use crate::error::TuneError;
use crate::oracle::Oracle;
use crate::pruner::Pruner;

/// A study's oracle and its pruner (if any).
pub type Search = (Box<dyn Oracle>, Option<Box<dyn Pruner>>);

/// The oracle and the pruner of a tune config.
///
/// # Errors
/// [`TuneError::Config`] naming the tune file and the `[tuner]` key.
pub fn build(cfg: &TuneConfig) -> Result<Search, TuneError> {
    let in_file = |e: TuneError| match e {
        TuneError::Config(m) => TuneError::Config(format!("{}: {m}", cfg.path.display())),
        other => other,
    };
    let oracle = crate::oracle::build(&cfg.tuner, &cfg.space, &cfg.objective).map_err(in_file)?;
    let pruner = crate::pruner::build(&cfg.tuner).map_err(in_file)?;
    Ok((oracle, pruner))
}
