//! Keras-style progress display: a bar per epoch on a terminal, one line per epoch otherwise
//! (Keras' `verbose=1` and `verbose=2`).
//!
//! ```text
//! Epoch 1/10
//! 422/422 ━━━━━━━━━━━━━━━━━━━━ 38s 90ms/step - accuracy: 0.7936 - loss: 0.5866 - val_accuracy: 0.8652 - val_loss: 0.3729
//! ```

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kiln::distribute::diagnosis;
use kiln::fit::FitContext;
use kiln::fit::{INPUT_WAIT_SECONDS, SAMPLES_PER_SECOND, SKIPPED_RECORDS, SkippedInput};
use kiln::{Callback, Logs};
use kiln_data::SkipStats;

/// Formats logs as Keras does: `name: 0.1234` joined by ` - `, `val_*` last.
pub fn format_logs(logs: &Logs) -> String {
    let mut parts: Vec<&(String, f64)> = logs
        .0
        .iter()
        .filter(|(n, _)| {
            ![
                SAMPLES_PER_SECOND,
                INPUT_WAIT_SECONDS,
                SKIPPED_RECORDS,
                "val_skipped_records",
                diagnosis::COMMUNICATION_SECONDS,
                diagnosis::TRAIN_SECONDS,
            ]
            .contains(&n.as_str())
        })
        .collect();
    parts.sort_by_key(|(n, _)| n.starts_with("val_"));
    parts
        .iter()
        .map(|(n, v)| {
            if n == kiln::fit::LOSS_SCALE {
                format!("{n}: {v}") // a power of two: 32768, 0.5
            } else {
                format!("{n}: {v:.4}")
            }
        })
        .collect::<Vec<_>>()
        .join(" - ")
}

fn duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
    } else if s >= 60 {
        format!("{}:{:02}", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// A note when the training loop spent more than a fifth of the epoch waiting for its input
/// (`input_wait_seconds` of `elapsed`): the pipeline, not the model, sets the pace. Epochs
/// under a second are too short to judge (start-up dominates) and get no note.
fn input_bound_hint(wait: Option<f64>, elapsed: Duration) -> Option<String> {
    let wait = wait?;
    let total = elapsed.as_secs_f64();
    (total >= 1.0 && wait > 0.2 * total).then(|| {
        format!(
            "  input-bound: the training step waited {wait:.1}s of {total:.1}s ({:.0}%) for the \
             input pipeline; raise num_parallel_calls, prefetch (\"AUTOTUNE\"), or cache decoded \
             data (kiln data bench CONFIG shows each stage's time)",
            100.0 * wait / total
        )
    })
}

/// The epoch log's lines about records the input skipped (`ignore_errors = true`): per
/// pipeline that skipped any, the count, then the first few records' errors.
///
/// ```text
///   ignore_errors: skipped 1 training record:
///     record 1: cannot decode data/dogs/broken.jpg: ...
/// ```
fn skipped_lines(skipped: &SkippedInput) -> String {
    let mut out = String::new();
    for (what, skips) in [
        ("training", &skipped.train),
        ("validation", &skipped.validation),
    ] {
        let Some(SkipStats { count, first }) = skips.as_ref().filter(|s| s.count > 0) else {
            continue;
        };
        let plural = if *count == 1 { "" } else { "s" };
        out += &format!("\n  ignore_errors: skipped {count} {what} record{plural}");
        if (first.len() as u64) < *count {
            out += &format!(", the first {}", first.len());
        }
        out += ":";
        for r in first {
            out += &format!("\n    record {}: {}", r.index, r.error);
        }
    }
    out
}

/// The progress callback.
pub struct Progress {
    interactive: bool,
    bar: Option<ProgressBar>,
    steps: Option<u64>,
    started: Instant,
    done: u64,
}

impl Progress {
    /// A bar when stdout is a terminal, plain lines otherwise. Under `mpirun`, whose workers'
    /// stdout is a pseudo-terminal even when `mpirun`'s own output goes to a file, plain lines.
    pub fn new() -> Progress {
        Progress {
            interactive: std::io::stdout().is_terminal()
                && kiln::distribute::world::launched().is_none(),
            bar: None,
            steps: None,
            started: Instant::now(),
            done: 0,
        }
    }

    fn per_step(&self) -> String {
        let ms = self.started.elapsed().as_secs_f64() * 1000.0 / self.done.max(1) as f64;
        format!("{ms:.0}ms/step")
    }
}

impl Callback for Progress {
    fn on_epoch_begin(
        &mut self,
        epoch: usize,
        epochs: usize,
        steps: Option<u64>,
        _ctx: &mut dyn FitContext,
    ) -> kiln::Result<()> {
        println!("Epoch {}/{}", epoch + 1, epochs);
        self.steps = steps;
        self.started = Instant::now();
        self.done = 0;
        if self.interactive {
            let width = steps.map(|s| s.to_string().len()).unwrap_or(4);
            let bar = match steps {
                Some(n) => ProgressBar::new(n),
                None => ProgressBar::no_length(),
            };
            bar.set_draw_target(ProgressDrawTarget::stdout_with_hz(10));
            let template = format!("{{pos:>{width}}}/{{len}} {{bar:20.green/white}} {{msg}}");
            bar.set_style(
                ProgressStyle::with_template(&template)
                    .expect("valid template")
                    .progress_chars("━━━"),
            );
            self.bar = Some(bar);
        }
        Ok(())
    }

    fn on_train_batch_end(
        &mut self,
        step: u64,
        logs: &Logs,
        _ctx: &mut dyn FitContext,
    ) -> kiln::Result<()> {
        self.done = step + 1;
        if let Some(bar) = &self.bar {
            let eta = self.steps.map(|n| {
                let left = n.saturating_sub(self.done) as f64;
                let per = self.started.elapsed().as_secs_f64() / self.done as f64;
                duration(Duration::from_secs_f64(left * per))
            });
            bar.set_position(self.done);
            bar.set_message(format!(
                "{} {} - {}",
                eta.unwrap_or_default(),
                self.per_step(),
                format_logs(logs)
            ));
        }
        Ok(())
    }

    fn on_epoch_end(
        &mut self,
        _epoch: usize,
        logs: &mut Logs,
        ctx: &mut dyn FitContext,
    ) -> kiln::Result<()> {
        let elapsed = self.started.elapsed();
        let mut line = format!(
            "{} {} - {}",
            duration(elapsed),
            self.per_step(),
            format_logs(logs)
        );
        if let Some(sps) = logs.get(SAMPLES_PER_SECOND) {
            line += &format!(" - {sps:.0} samples/s");
        }
        // With replicas: the FAQ's split of the step time (compute, communication, input).
        if let Some(split) = diagnosis::StepTimes::from_logs(logs, elapsed.as_secs_f64()) {
            line += &format!("\n  {}", split.line());
        } else if let Some(hint) = input_bound_hint(logs.get(INPUT_WAIT_SECONDS), elapsed) {
            line += &format!("\n{hint}");
        }
        line += &skipped_lines(&ctx.skipped_input());
        match self.bar.take() {
            Some(bar) => {
                bar.set_position(self.done);
                bar.finish_with_message(line);
                // indicatif leaves the cursor at the end of the finished bar.
                println!();
            }
            None => println!("{}/{} - {line}", self.done, self.steps.unwrap_or(self.done)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_bound_hint_only_past_a_fifth_of_the_epoch() {
        let epoch = Duration::from_secs(10);
        assert_eq!(input_bound_hint(Some(1.9), epoch), None);
        assert_eq!(input_bound_hint(None, epoch), None);
        let hint = input_bound_hint(Some(5.0), epoch).unwrap();
        assert!(hint.contains("waited 5.0s of 10.0s (50%)"), "{hint}");
        // A 0.05 s epoch that waited 60% of it: too short to judge.
        assert_eq!(
            input_bound_hint(Some(0.03), Duration::from_millis(50)),
            None
        );
    }

    #[test]
    fn skipped_records_are_counted_and_the_first_listed() {
        let record = |index, error: &str| kiln_data::SkippedRecord {
            index,
            path: None,
            error: error.into(),
        };
        assert_eq!(skipped_lines(&SkippedInput::default()), "");
        let none = SkippedInput {
            train: Some(SkipStats::default()),
            validation: None,
        };
        assert_eq!(skipped_lines(&none), "", "a pipeline that skipped nothing");
        let some = SkippedInput {
            train: Some(SkipStats {
                count: 1,
                first: vec![record(1, "cannot decode d/b.jpg: bad")],
            }),
            validation: Some(SkipStats {
                count: 7,
                first: vec![record(0, "v.csv:2: x"), record(3, "v.csv:5: y")],
            }),
        };
        assert_eq!(
            skipped_lines(&some),
            "\n  ignore_errors: skipped 1 training record:\n    record 1: cannot decode d/b.jpg: \
             bad\n  ignore_errors: skipped 7 validation records, the first 2:\n    record 0: \
             v.csv:2: x\n    record 3: v.csv:5: y"
        );
        let mut logs = Logs::default();
        logs.set("loss", 0.5);
        logs.set(SKIPPED_RECORDS, 1.0);
        logs.set("val_skipped_records", 7.0);
        assert_eq!(format_logs(&logs), "loss: 0.5000");
    }

    #[test]
    fn logs_format_like_keras() {
        let mut logs = Logs::default();
        logs.set("loss", 0.58661);
        logs.set("val_loss", 0.37291);
        logs.set("accuracy", 0.79364);
        assert_eq!(
            format_logs(&logs),
            "loss: 0.5866 - accuracy: 0.7936 - val_loss: 0.3729"
        );
        assert_eq!(duration(Duration::from_secs(75)), "1:15");
        assert_eq!(duration(Duration::from_secs(38)), "38s");
    }
}
