//! Names and paths from a config: a run `name` is one plain path component, and a relative
//! callback path stays inside the run directory.
//!
//! `runs/<name>` is the run directory, so a name of `..`, `a/b` or one with control characters
//! would put the run (its `config.toml`, weights, checkpoints) somewhere else. Keras lets a
//! callback write anywhere; kiln keeps relative paths (`CSVLogger.filename`,
//! `TensorBoard.log_dir`, `ModelCheckpoint.filepath`, `BackupAndRestore.backup_dir`) inside the
//! run directory, as documented, and takes an absolute path as the explicit way out.

use std::path::{Component, Path};

use crate::error::{KilnError, Result};

/// The longest name most file systems take for one path component, in bytes.
const MAX_NAME_BYTES: usize = 255;

/// Checks a run name (`name = "..."`), which becomes the directory `runs/<name>`.
///
/// # Errors
/// [`KilnError::Config`] for `key`: empty, `.`/`..`, a path separator, a control character or
/// longer than 255 bytes.
pub fn check_run_name(key: &str, name: &str) -> Result<()> {
    let problem = if name.trim().is_empty() {
        Some("is empty")
    } else if name == "." || name == ".." {
        Some("names a directory above or at runs/")
    } else if name.contains(['/', '\\']) {
        Some("holds a path separator")
    } else if name.chars().any(char::is_control) {
        Some("holds a control character")
    } else if name.chars().any(crate::error::is_unsafe_on_terminal) {
        Some("holds a bidirectional formatting character (it reorders what a terminal shows)")
    } else if name.len() > MAX_NAME_BYTES {
        Some("is longer than 255 bytes")
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(why) => Err(KilnError::config(
            key,
            format!(
                "{:?} {why}: the run directory is runs/<name>, so a name is one plain directory \
                 name; use letters, digits, '-', '_' or '.'",
                name
            ),
        )),
    }
}

/// Checks that a relative `path` stays inside the run directory (absolute paths are taken as
/// they are, as Keras takes them).
///
/// # Errors
/// [`KilnError::Config`] for `key` when a `..` component leaves the run directory.
pub fn check_inside_run_dir(key: &str, path: &Path) -> Result<()> {
    let text = path.to_string_lossy();
    if text.chars().any(crate::error::is_unsafe_on_terminal) {
        return Err(KilnError::config(
            key,
            format!(
                "{text:?} holds a control or bidirectional formatting character; use a plain path"
            ),
        ));
    }
    if path.is_absolute() {
        return Ok(());
    }
    let mut depth = 0usize;
    for c in path.components() {
        match c {
            Component::ParentDir if depth == 0 => {
                return Err(KilnError::config(
                    key,
                    format!(
                        "\"{}\" leaves the run directory (relative paths are inside it); give a \
                         path inside it, or an absolute path to write elsewhere",
                        path.display()
                    ),
                ));
            }
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    Ok(())
}

/// Checks that `path` names a file: its last component is a name, not `.`, `..` or `/`.
///
/// # Errors
/// [`KilnError::Config`] for `key`.
pub fn check_file_name(key: &str, path: &Path) -> Result<()> {
    match path.components().next_back() {
        Some(Component::Normal(_)) if !path.to_string_lossy().ends_with('/') => Ok(()),
        _ => Err(KilnError::config(
            key,
            format!(
                "\"{}\" names a directory, not a file; add a file name",
                path.display()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_are_one_plain_component() {
        for good in ["mlp", "cnn-2.v1", "a b", "épreuve", ".hidden"] {
            check_run_name("name", good).unwrap();
        }
        for (bad, why) in [
            ("..", "above or at"),
            (".", "above or at"),
            ("", "empty"),
            ("  ", "empty"),
            ("a/b", "separator"),
            ("..\\x", "separator"),
            ("x\u{1b}[2J", "control"),
            ("a\nb", "control"),
            ("ab\u{202e}cod.exe", "bidirectional"),
        ] {
            let e = check_run_name("name", bad).unwrap_err().to_string();
            assert!(e.contains("name") && e.contains(why), "{bad:?}: {e}");
        }
        assert!(check_run_name("name", &"x".repeat(256)).is_err());
        check_run_name("name", &"x".repeat(255)).unwrap();
    }

    #[test]
    fn paths_with_terminal_controls_or_no_file_name_are_refused() {
        for bad in ["x\u{1b}[2J.csv", "/tmp/a\u{202e}b.csv"] {
            let e = check_inside_run_dir("k", Path::new(bad))
                .unwrap_err()
                .to_string();
            assert!(e.contains("control or bidirectional"), "{e}");
        }
        for bad in [".", "logs/..", "logs/", "/"] {
            assert!(check_file_name("k", Path::new(bad)).is_err(), "{bad}");
        }
        check_file_name("k", Path::new("logs/log.csv")).unwrap();
    }

    #[test]
    fn relative_paths_stay_inside() {
        for good in [
            "log.csv",
            "logs/x/../y.csv",
            "./a",
            "/tmp/../abs.csv",
            "a/b/../../c",
        ] {
            check_inside_run_dir("k", Path::new(good)).unwrap();
        }
        for bad in [
            "../escape.csv",
            "../../../escape.csv",
            "a/../../b",
            "./../x",
        ] {
            let e = check_inside_run_dir("callbacks.CSVLogger.filename", Path::new(bad))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("callbacks.CSVLogger.filename") && e.contains("leaves"),
                "{e}"
            );
        }
    }
}
