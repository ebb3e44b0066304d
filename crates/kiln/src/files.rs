//! Writing files so that a crash leaves the old file or the new one, never a torn one. Low
//! in the crate's layers (it needs only [`crate::error`]): the model's weights, checkpoints,
//! run directories and exports all write through it.

use std::path::Path;

use crate::error::{KilnError, Result};

/// Writes `bytes` to `path` atomically (temporary file in the same directory, fsync, rename).
///
/// # Errors
/// [`KilnError::Io`] naming the path.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp).map_err(|e| KilnError::io(&tmp, e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| KilnError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| KilnError::io(path, e))
}
