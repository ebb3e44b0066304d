//! Mutation fuzzing on stable Rust, for the parser tests of kiln's crates.
//!
//! `cargo fuzz` needs a nightly compiler, which these machines do not have, so kiln's fuzz
//! targets are ordinary `#[test]`s: [`fuzz`] mutates valid seed inputs (AFL-style havoc: bit
//! flips, "interesting" integers, deleted / duplicated / inserted ranges, truncation, splices
//! of two seeds), feeds each case to the parser on a worker thread and fails the test on the
//! first panic or on a case that runs past its time limit (a hang), naming the case and
//! saving its input under the system's temp directory. An abort (a failed allocation, a stack
//! overflow) kills the test binary, which fails the test too.
//!
//! The number of cases comes from `KILN_FUZZ_CASES` (default: the target's own, sized for
//! CI); a long local run is `KILN_FUZZ_CASES=100000 cargo test --release --workspace fuzz_`.
//! Every run prints one line per target: cases, accepted, refused and the slowest case.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A small deterministic generator (SplitMix64): the same seed gives the same cases.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// Integers that parsers mishandle: zero, one, sign and width edges, huge sizes.
const INTERESTING: [u64; 12] = [
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 40,
    1 << 62,
    u64::MAX,
];

/// One havoc round: 1 to 8 stacked mutations of `input` (or of a splice of it with `other`),
/// never longer than `max_len`.
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8], max_len: usize) -> Vec<u8> {
    let mut data = input.to_vec();
    for _ in 0..1 + rng.below(8) {
        mutate_once(rng, &mut data, other);
    }
    data.truncate(max_len);
    data
}

fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8]) {
    let len = data.len();
    match rng.below(9) {
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = rng.next_u64() as u8;
        }
        2 => overwrite_interesting(rng, data),
        3 if len > 0 => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(16.min(len - start))).min(len);
            data.drain(start..end);
        }
        4 if len > 0 => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(64)).min(len);
            let copy = data[start..end].to_vec();
            let at = rng.below(len + 1);
            data.splice(at..at, copy);
        }
        5 => {
            let at = rng.below(len + 1);
            let bytes: Vec<u8> = (0..1 + rng.below(16))
                .map(|_| rng.next_u64() as u8)
                .collect();
            data.splice(at..at, bytes);
        }
        6 if len > 0 => data.truncate(rng.below(len)),
        7 if !other.is_empty() => {
            let cut = rng.below(len + 1);
            let from = rng.below(other.len());
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        8 if len > 0 => {
            // ASCII digits: text formats (CSV, TOML, JSON) grow huge or odd numbers.
            let i = rng.below(len);
            data[i] = b"0123456789-+.eE"[rng.below(15)];
        }
        _ => {}
    }
}

fn overwrite_interesting(rng: &mut Rng, data: &mut [u8]) {
    let value = INTERESTING[rng.below(INTERESTING.len())];
    let width = [1, 2, 4, 8][rng.below(4)];
    if data.len() < width {
        return;
    }
    let at = rng.below(data.len() - width + 1);
    let bytes = if rng.below(2) == 0 {
        value.to_le_bytes()
    } else {
        value.to_be_bytes()
    };
    let bytes = if rng.below(2) == 0 {
        &bytes[..width]
    } else {
        &bytes[8 - width..]
    };
    data[at..at + width].copy_from_slice(bytes);
}

/// How a fuzz run is bounded.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Cases to run (`KILN_FUZZ_CASES` overrides it).
    pub cases: u64,
    /// A case that runs longer than this is reported as a hang.
    pub per_case: Duration,
    /// Mutated inputs are cut to this many bytes.
    pub max_len: usize,
    /// The generator's seed (`KILN_FUZZ_SEED` overrides it).
    pub seed: u64,
}

impl Limits {
    /// `cases` by default, 10 s per case, inputs up to 64 KiB, seed 1.
    pub fn new(cases: u64) -> Self {
        let env = |key: &str| {
            std::env::var(key)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Limits {
            cases: env("KILN_FUZZ_CASES").unwrap_or(cases),
            per_case: Duration::from_secs(10),
            max_len: 64 << 10,
            seed: env("KILN_FUZZ_SEED").unwrap_or(1),
        }
    }
}

/// What a finished run saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub cases: u64,
    /// Inputs the target accepted (`Ok`).
    pub accepted: u64,
    /// Inputs the target refused with an error (`Err`): the expected outcome for most.
    pub refused: u64,
    pub slowest: Duration,
}

enum Outcome {
    Done(Report),
    Panicked {
        case: u64,
        input: Vec<u8>,
        message: String,
    },
}

/// Runs `target` on `limits.cases` mutations of `seeds` (the seeds themselves first) and
/// returns the counts; panics (failing the calling test) on a panic or a hang, with the
/// offending input saved to a file whose path is in the message.
pub fn fuzz<T, E, F>(name: &str, seeds: Vec<Vec<u8>>, limits: Limits, target: F) -> Report
where
    F: FnMut(&[u8]) -> Result<T, E> + Send + 'static,
{
    assert!(!seeds.is_empty(), "fuzz {name}: no seed inputs");
    let progress = Arc::new(Progress::default());
    let (tx, rx) = mpsc::channel();
    let worker = {
        let (progress, limits) = (progress.clone(), limits.clone());
        move || {
            let _ = tx.send(run_cases(&seeds, &limits, &progress, target));
        }
    };
    std::thread::Builder::new()
        .name(format!("fuzz-{name}"))
        .spawn(worker)
        .expect("fuzz: cannot start the worker thread");
    let outcome = watch(name, &rx, &progress, &limits);
    match outcome {
        Outcome::Done(report) => {
            eprintln!(
                "fuzz {name}: {} cases, {} accepted, {} refused, slowest {:.1} ms (seed {})",
                report.cases,
                report.accepted,
                report.refused,
                report.slowest.as_secs_f64() * 1e3,
                limits.seed
            );
            report
        }
        Outcome::Panicked {
            case,
            input,
            message,
        } => {
            let path = save(name, case, &input);
            panic!(
                "fuzz {name}: case {case} panicked: {message}; input saved to {}",
                path.display()
            )
        }
    }
}

#[derive(Default)]
struct Progress {
    /// 1 + the index of the case running now (0: none yet).
    case: AtomicU64,
    /// The case's start, in ms since the run's start.
    started_ms: AtomicU64,
    current: std::sync::Mutex<Vec<u8>>,
}

fn run_cases<T, E, F>(
    seeds: &[Vec<u8>],
    limits: &Limits,
    progress: &Progress,
    mut target: F,
) -> Outcome
where
    F: FnMut(&[u8]) -> Result<T, E>,
{
    let mut rng = Rng::new(limits.seed);
    let mut report = Report::default();
    let t0 = Instant::now();
    for case in 0..limits.cases {
        let input = case_input(&mut rng, seeds, case, limits.max_len);
        *progress.current.lock().unwrap_or_else(|e| e.into_inner()) = input.clone();
        progress
            .started_ms
            .store(t0.elapsed().as_millis() as u64, Ordering::SeqCst);
        progress.case.store(case + 1, Ordering::SeqCst);
        let start = Instant::now();
        match catch_unwind(AssertUnwindSafe(|| target(&input))) {
            Ok(Ok(_)) => report.accepted += 1,
            Ok(Err(_)) => report.refused += 1,
            Err(payload) => {
                return Outcome::Panicked {
                    case,
                    input,
                    message: panic_message(&payload),
                };
            }
        }
        report.slowest = report.slowest.max(start.elapsed());
        report.cases += 1;
    }
    Outcome::Done(report)
}

fn case_input(rng: &mut Rng, seeds: &[Vec<u8>], case: u64, max_len: usize) -> Vec<u8> {
    if (case as usize) < seeds.len() {
        return seeds[case as usize].clone();
    }
    let base = &seeds[rng.below(seeds.len())];
    let other = &seeds[rng.below(seeds.len())];
    mutate(rng, base, other, max_len)
}

fn watch(
    name: &str,
    rx: &mpsc::Receiver<Outcome>,
    progress: &Progress,
    limits: &Limits,
) -> Outcome {
    let t0 = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(outcome) => return outcome,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("fuzz {name}: the worker thread ended without a report")
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let case = progress.case.load(Ordering::SeqCst);
        let started = Duration::from_millis(progress.started_ms.load(Ordering::SeqCst));
        if case > 0 && t0.elapsed().saturating_sub(started) > limits.per_case {
            let input = progress
                .current
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let path = save(name, case - 1, &input);
            panic!(
                "fuzz {name}: case {} still running after {:?} (a hang); input saved to {}",
                case - 1,
                limits.per_case,
                path.display()
            );
        }
    }
}

fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a non-string panic payload)".to_string()
    }
}

fn save(name: &str, case: u64, input: &[u8]) -> PathBuf {
    let path = std::env::temp_dir().join(format!("kiln-fuzz-{name}-case{case}.bin"));
    if let Err(e) = std::fs::write(&path, input) {
        eprintln!(
            "fuzz {name}: cannot save the input to {}: {e}",
            path.display()
        );
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_deterministic_and_bounded() {
        let seed = b"hello, world".to_vec();
        let run = |s| {
            let mut rng = Rng::new(s);
            (0..200)
                .map(|_| mutate(&mut rng, &seed, b"xyz", 32))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        assert!(run(7).iter().all(|m| m.len() <= 32));
        assert!(
            run(7)
                .iter()
                .filter(|m| m.as_slice() != seed.as_slice())
                .count()
                > 150
        );
    }

    #[test]
    fn counts_accepted_and_refused() {
        let limits = Limits {
            cases: 500,
            ..Limits::new(500)
        };
        let cases = limits.cases;
        let report = fuzz("even", vec![b"abcd".to_vec()], limits, |b: &[u8]| {
            if b.len().is_multiple_of(2) {
                Ok(())
            } else {
                Err(())
            }
        });
        assert_eq!(report.cases, cases);
        assert_eq!(report.accepted + report.refused, cases);
        assert!(report.accepted > 0 && report.refused > 0, "{report:?}");
    }

    #[test]
    #[should_panic(expected = "panicked: boom")]
    fn a_panic_fails_the_run() {
        fuzz(
            "boom",
            vec![b"seed".to_vec()],
            Limits::new(50),
            |b: &[u8]| -> Result<(), ()> {
                if b != b"seed" {
                    panic!("boom");
                }
                Ok(())
            },
        );
    }

    #[test]
    #[should_panic(expected = "a hang")]
    fn a_hang_fails_the_run() {
        let limits = Limits {
            per_case: Duration::from_millis(300),
            ..Limits::new(5)
        };
        fuzz(
            "hang",
            vec![b"seed".to_vec()],
            limits,
            |_: &[u8]| -> Result<(), ()> {
                std::thread::sleep(Duration::from_secs(3600));
                Ok(())
            },
        );
    }
}
