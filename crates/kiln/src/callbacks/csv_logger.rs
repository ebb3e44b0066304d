//! `CSVLogger`: one CSV row per epoch (`keras/src/callbacks/csv_logger.py`, Keras 3).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state;
use crate::error::{KilnError, Result};
use crate::fit::{Callback, FitContext, Logs};

/// Keras' `CSVLogger(filename, separator=",", append=False)`, writing the same bytes Keras
/// writes:
/// * the header `epoch,<log keys sorted>` when the file is new (or, with `append`, empty); when
///   the first epoch's logs have no `val_*` key, `val_<key>` columns are added for every key
///   (Keras does this so a later validation run fits the header) and hold `NA`;
/// * one row per epoch: the 0-based epoch, then each value as Python's `repr(float)` writes it
///   (`0.5`, `1e-05`, `12345.0`, `nan`), `NA` for a key missing from that epoch;
/// * Python's `csv.excel` dialect: `\r\n` line ends, fields with the separator, a quote or a
///   line break quoted;
/// * the file flushed after each row.
///
/// Keys are fixed by the first epoch end of a training; keys that appear later are not
/// written (as in Keras).
///
/// **Resumed runs** (BackupAndRestore): [`Callback::state`] keeps the file's length and the
/// columns at each checkpoint; a resumed run cuts the file back to that length (dropping rows
/// of epochs that the resume runs again) and continues it, so the file ends as the
/// uninterrupted run's would. (Keras would start the file over, or with `append`, repeat rows.)
#[derive(Debug)]
pub struct CSVLogger {
    filename: PathBuf,
    separator: char,
    append: bool,
    file: Option<File>,
    keys: Option<Vec<String>>,
    write_header: bool,
    /// From `restore_state`: where the next training continues the file.
    resume: Option<State>,
}

/// What [`Callback::state`] keeps.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    /// The file's length in bytes.
    bytes: u64,
    /// The columns, once fixed.
    keys: Option<Vec<String>>,
}

impl CSVLogger {
    /// Logs to `filename`, overwriting it at each training begin.
    pub fn new(filename: impl Into<PathBuf>) -> CSVLogger {
        CSVLogger {
            filename: filename.into(),
            separator: ',',
            append: false,
            file: None,
            keys: None,
            write_header: true,
            resume: None,
        }
    }

    /// The field separator (Keras' `separator`).
    pub fn separator(mut self, separator: char) -> Self {
        self.separator = separator;
        self
    }

    /// Append to an existing file (a resumed run) instead of overwriting it; the header is
    /// written only if the file is missing or empty.
    pub fn append(mut self, append: bool) -> Self {
        self.append = append;
        self
    }

    /// The file written.
    pub fn filename(&self) -> &Path {
        &self.filename
    }

    fn io(&self, e: std::io::Error) -> KilnError {
        KilnError::io(&self.filename, e)
    }

    /// A field as `csv.excel` writes it.
    fn field(&self, text: &str) -> String {
        if text.contains([self.separator, '"', '\r', '\n']) {
            format!("\"{}\"", text.replace('"', "\"\""))
        } else {
            text.to_string()
        }
    }

    fn write_row(&mut self, fields: &[String]) -> Result<()> {
        let sep = self.separator.to_string();
        let line = fields
            .iter()
            .map(|f| self.field(f))
            .collect::<Vec<_>>()
            .join(&sep);
        let file = self.file.as_mut().expect("opened by on_train_begin");
        let written = file
            .write_all(format!("{line}\r\n").as_bytes())
            .and_then(|()| file.flush());
        written.map_err(|e| self.io(e))
    }
}

/// `repr(x)` for a Python float: the shortest digits that read back to `x`, in positional
/// notation for decimal exponents -4..16 (with `.0` on whole numbers) and scientific
/// notation otherwise (`1e-05`, `1.5e+16`); `nan`, `inf`, `-inf`.
pub fn python_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // Rust's `{:e}` prints the shortest round-trip digits ("1.2345e-5"), but breaks an exact
    // tie between two shortest candidates upwards, where Python (David Gay's dtoa) takes the
    // even one: 887.45538330078125 is `887.4553833007812` in Python. Formatting to the same
    // number of digits with a precision rounds half to even; keep that when it round-trips.
    let shortest = format!("{:e}", x.abs());
    let digits = shortest
        .split('e')
        .next()
        .unwrap_or("")
        .replace('.', "")
        .len();
    let even = format!("{:.*e}", digits.saturating_sub(1), x.abs());
    let sci = if even.parse::<f64>() == Ok(x.abs()) {
        even
    } else {
        shortest
    };
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if x.is_sign_negative() { "-" } else { "" };
    let body = if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        if exp < 0 {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        } else if exp + 1 >= n {
            format!("{digits}{}.0", "0".repeat((exp + 1 - n) as usize))
        } else {
            let (int, frac) = digits.split_at((exp + 1) as usize);
            format!("{int}.{frac}")
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let mantissa = if rest.is_empty() {
            first.to_string()
        } else {
            format!("{first}.{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{esign}{:02}", exp.abs())
    };
    format!("{sign}{body}")
}

impl Callback for CSVLogger {
    fn on_train_begin(&mut self, _ctx: &mut dyn FitContext) -> Result<()> {
        if let Some(resume) = self.resume.take() {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.filename)
                .map_err(|e| self.io(e))?;
            self.file = Some(file);
            return self.continue_at(resume);
        }
        self.write_header = true;
        if self.append
            && let Ok(f) = File::open(&self.filename)
        {
            let mut first = String::new();
            BufReader::new(f)
                .read_line(&mut first)
                .map_err(|e| self.io(e))?;
            self.write_header = first.is_empty();
        }
        if let Some(parent) = self.filename.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| KilnError::io(parent, e))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .append(self.append)
            .truncate(!self.append)
            .open(&self.filename)
            .map_err(|e| self.io(e))?;
        self.file = Some(file);
        self.keys = None;
        Ok(())
    }

    fn on_epoch_end(
        &mut self,
        epoch: usize,
        logs: &mut Logs,
        ctx: &mut dyn FitContext,
    ) -> Result<()> {
        if self.file.is_none() {
            self.on_train_begin(ctx)?;
        }
        if self.keys.is_none() {
            let mut keys: Vec<String> = logs.0.iter().map(|(k, _)| k.clone()).collect();
            keys.sort();
            keys.dedup();
            if !keys.is_empty() && !keys.iter().any(|k| k.starts_with("val_")) {
                let val: Vec<String> = keys.iter().map(|k| format!("val_{k}")).collect();
                keys.extend(val);
            }
            if self.write_header {
                let mut header = vec!["epoch".to_string()];
                header.extend(keys.iter().cloned());
                self.write_row(&header)?;
            }
            self.keys = Some(keys);
        }
        let mut row = vec![epoch.to_string()];
        for key in self.keys.as_ref().expect("set above") {
            row.push(logs.get(key).map_or("NA".to_string(), python_float_repr));
        }
        self.write_row(&row)
    }

    fn on_train_end(&mut self, _logs: &Logs, _ctx: &mut dyn FitContext) -> Result<()> {
        self.file = None;
        self.resume = None;
        Ok(())
    }

    fn state(&self) -> Option<serde_json::Value> {
        let bytes = self.file.as_ref()?.metadata().ok()?.len();
        Some(state::encode(
            "CSVLogger",
            &State {
                bytes,
                keys: self.keys.clone(),
            },
        ))
    }

    fn restore_state(&mut self, value: &serde_json::Value) -> Result<()> {
        let s: State = state::decode("CSVLogger", value)?;
        if self.file.is_some() {
            // A NaN rollback inside `fit`: cut the file back now.
            self.continue_at(s)
        } else {
            self.resume = Some(s);
            Ok(())
        }
    }
}

impl CSVLogger {
    /// Cuts the open file back to `s.bytes` (when longer) and continues with its columns.
    fn continue_at(&mut self, s: State) -> Result<()> {
        let file = self.file.as_mut().expect("opened by the caller");
        let len = file
            .metadata()
            .map_err(|e| KilnError::io(&self.filename, e))?
            .len();
        if len > s.bytes {
            file.set_len(s.bytes)
                .map_err(|e| KilnError::io(&self.filename, e))?;
        }
        if len.min(s.bytes) == 0 {
            // Nothing to continue (the file was empty or is gone): start it over.
            self.keys = None;
            self.write_header = true;
        } else {
            self.keys = s.keys;
            self.write_header = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::ManualContext;

    fn logs(pairs: &[(&str, f64)]) -> Logs {
        let mut l = Logs::default();
        for (k, v) in pairs {
            l.set(*k, *v);
        }
        l
    }

    fn train(cb: &mut CSVLogger, epochs: &[Logs]) {
        let mut ctx = ManualContext::new(0.1);
        cb.on_train_begin(&mut ctx).unwrap();
        for (epoch, l) in epochs.iter().enumerate() {
            cb.on_epoch_end(epoch, &mut l.clone(), &mut ctx).unwrap();
        }
        cb.on_train_end(&Logs::default(), &mut ctx).unwrap();
    }

    // Expected bytes: Keras 3.15.1's CSVLogger with the same logs, printed by
    // `tests/reference/keras_callbacks_reference.py`.

    #[test]
    fn rows_match_keras_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.csv");
        let mut cb = CSVLogger::new(&path);
        train(
            &mut cb,
            &[
                logs(&[
                    ("loss", 0.5),
                    ("accuracy", 0.25),
                    ("val_loss", 1e-5),
                    ("val_accuracy", 1.0),
                ]),
                logs(&[
                    ("loss", 0.123456789),
                    ("accuracy", 1e16),
                    ("val_loss", 12345.0),
                    ("val_accuracy", f64::NAN),
                ]),
            ],
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"epoch,accuracy,loss,val_accuracy,val_loss\r\n0,0.25,0.5,1.0,1e-05\r\n1,1e+16,0.123456789,nan,12345.0\r\n"
        );
    }

    #[test]
    fn without_validation_val_columns_hold_na() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.csv");
        train(
            &mut CSVLogger::new(&path),
            &[logs(&[("loss", 0.5), ("accuracy", 0.75)])],
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"epoch,accuracy,loss,val_accuracy,val_loss\r\n0,0.75,0.5,NA,NA\r\n"
        );
    }

    #[test]
    fn append_writes_the_header_once_and_overwrite_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("log.csv");
        let epoch = [logs(&[("loss", 2.0), ("val_loss", 3.0)])];
        for _ in 0..2 {
            train(&mut CSVLogger::new(&path).append(true), &epoch);
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"epoch,loss,val_loss\r\n0,2.0,3.0\r\n0,2.0,3.0\r\n"
        );
        train(&mut CSVLogger::new(&path), &epoch);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"epoch,loss,val_loss\r\n0,2.0,3.0\r\n"
        );
    }

    #[test]
    fn separators_and_quotes_follow_python_csv() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.tsv");
        let mut cb = CSVLogger::new(&path).separator(';');
        train(&mut cb, &[logs(&[("a;b", 1.0), ("val_x\"y", -0.0)])]);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "epoch;\"a;b\";\"val_x\"\"y\"\r\n0;1.0;-0.0\r\n"
        );
    }

    #[test]
    // Ties and exact binary values are written out in full on purpose: they are the cases
    // where Python's repr rounds.
    #[allow(clippy::excessive_precision)]
    fn python_repr_of_floats() {
        let cases = [
            (0.1, "0.1"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (1e-4, "0.0001"),
            (1.5e-5, "1.5e-05"),
            (123456789012345.6, "123456789012345.6"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345e100, "1.2345e+100"),
            (5e-324, "5e-324"),
            (0.0, "0.0"),
            (0.6206240057945251, "0.6206240057945251"),
            // A float32 value: an exact tie between two 16-digit strings, broken to even.
            (887.45538330078125, "887.4553833007812"),
            (-723804013522413.25, "-723804013522413.2"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (x, want) in cases {
            assert_eq!(python_float_repr(x), want, "repr({x:e})");
        }
    }

    #[test]
    fn a_resumed_run_continues_the_file_as_the_uninterrupted_one() {
        let dir = tempfile::tempdir().unwrap();
        let epochs: Vec<Logs> = (0..4)
            .map(|e| logs(&[("loss", 1.0 / (e as f64 + 1.0)), ("val_loss", e as f64)]))
            .collect();
        let whole = dir.path().join("whole.csv");
        train(&mut CSVLogger::new(&whole), &epochs);
        let want = std::fs::read(&whole).unwrap();
        // Checkpoint after epoch 1; the killed run wrote epoch 2's row too; the resume runs
        // epochs 2 and 3 again with a fresh logger restored from the checkpoint's state.
        let path = dir.path().join("resumed.csv");
        let mut first = CSVLogger::new(&path);
        let mut ctx = ManualContext::new(0.1);
        first.on_train_begin(&mut ctx).unwrap();
        let mut saved = None;
        for (epoch, l) in epochs.iter().enumerate().take(3) {
            first.on_epoch_end(epoch, &mut l.clone(), &mut ctx).unwrap();
            if epoch == 1 {
                saved = first.state().map(|s| s.to_string());
            }
        }
        drop(first); // killed
        let mut second = CSVLogger::new(&path);
        second
            .restore_state(&serde_json::from_str(&saved.unwrap()).unwrap())
            .unwrap();
        second.on_train_begin(&mut ctx).unwrap();
        for (epoch, l) in epochs.iter().enumerate().skip(2) {
            second
                .on_epoch_end(epoch, &mut l.clone(), &mut ctx)
                .unwrap();
        }
        second.on_train_end(&Logs::default(), &mut ctx).unwrap();
        assert_eq!(
            String::from_utf8(std::fs::read(&path).unwrap()).unwrap(),
            String::from_utf8(want).unwrap()
        );
        // Without the state the resumed run would start the file over at epoch 2.
        assert!(CSVLogger::new(&path).state().is_none());
    }
}
