//! Prometheus metrics, written in the text exposition format
//! (https://prometheus.io/docs/instrumenting/exposition_formats/, version 0.0.4).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `kiln_serve_requests_total` | counter | `model`, `version`, `code` (HTTP status) |
//! | `kiln_serve_request_duration_seconds` | histogram | `model` (predict requests) |
//! | `kiln_serve_batch_size` | histogram | `model` (examples per forward pass) |
//! | `kiln_serve_queue_batches` | gauge | batches waiting for a thread |
//! | `kiln_serve_model_versions_available` | gauge | `model` |

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Upper bounds of the latency buckets, in seconds.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Upper bounds of the batch size buckets, in examples.
const BATCH_BUCKETS: [f64; 11] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

#[derive(Debug, Clone, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (c, b) in self.counts.iter_mut().zip(bounds) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (c, b) in self.counts.iter().zip(bounds) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

#[derive(Debug, Default)]
struct Inner {
    requests: BTreeMap<(String, String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    batch: BTreeMap<String, Histogram>,
    available: BTreeMap<String, usize>,
    queue: usize,
}

/// The server's metrics. Cheap to update from any thread.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

/// Escapes a label value (`\`, `"` and newlines, as the exposition format requires).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a finished request (`version` empty when none was resolved).
    pub fn request(&self, model: &str, version: &str, code: u16) {
        *self
            .lock()
            .requests
            .entry((model.into(), version.into(), code))
            .or_insert(0) += 1;
    }

    /// Records a predict request's latency in seconds.
    pub fn latency(&self, model: &str, seconds: f64) {
        self.lock()
            .latency
            .entry(model.into())
            .or_default()
            .observe(&LATENCY_BUCKETS, seconds);
    }

    /// Records the number of examples of one forward pass.
    pub fn batch(&self, model: &str, examples: usize) {
        self.lock()
            .batch
            .entry(model.into())
            .or_default()
            .observe(&BATCH_BUCKETS, examples as f64);
    }

    /// Sets the number of batches waiting.
    pub fn queue(&self, batches: usize) {
        self.lock().queue = batches;
    }

    /// Sets the number of available versions of `model`.
    pub fn available(&self, model: &str, versions: usize) {
        self.lock().available.insert(model.into(), versions);
    }

    /// The metrics in Prometheus' text format.
    pub fn render(&self) -> String {
        let m = self.lock();
        let mut out = String::new();
        out +=
            "# HELP kiln_serve_requests_total Requests by model, version and HTTP status code.\n";
        out += "# TYPE kiln_serve_requests_total counter\n";
        for ((model, version, code), n) in &m.requests {
            let _ = writeln!(
                out,
                "kiln_serve_requests_total{{model=\"{}\",version=\"{}\",code=\"{code}\"}} {n}",
                escape(model),
                escape(version)
            );
        }
        out += "# HELP kiln_serve_request_duration_seconds Predict request latency, from the \
                complete body to the response.\n";
        out += "# TYPE kiln_serve_request_duration_seconds histogram\n";
        for (model, h) in &m.latency {
            let labels = format!("model=\"{}\"", escape(model));
            h.write(
                &mut out,
                "kiln_serve_request_duration_seconds",
                &labels,
                &LATENCY_BUCKETS,
            );
        }
        out += "# HELP kiln_serve_batch_size Examples per forward pass.\n";
        out += "# TYPE kiln_serve_batch_size histogram\n";
        for (model, h) in &m.batch {
            let labels = format!("model=\"{}\"", escape(model));
            h.write(&mut out, "kiln_serve_batch_size", &labels, &BATCH_BUCKETS);
        }
        out += "# HELP kiln_serve_queue_batches Batches waiting for a batch thread.\n";
        out += "# TYPE kiln_serve_queue_batches gauge\n";
        let _ = writeln!(out, "kiln_serve_queue_batches {}", m.queue);
        out += "# HELP kiln_serve_model_versions_available Versions loaded and serving.\n";
        out += "# TYPE kiln_serve_model_versions_available gauge\n";
        for (model, n) in &m.available {
            let _ = writeln!(
                out,
                "kiln_serve_model_versions_available{{model=\"{}\"}} {n}",
                escape(model)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counters_labelled() {
        let m = Metrics::default();
        m.request("mnist", "2", 200);
        m.request("mnist", "2", 200);
        m.request("mnist", "", 404);
        m.batch("mnist", 3);
        m.batch("mnist", 40);
        let text = m.render();
        assert!(
            text.contains(
                "kiln_serve_requests_total{model=\"mnist\",version=\"2\",code=\"200\"} 2"
            )
        );
        assert!(
            text.contains("kiln_serve_requests_total{model=\"mnist\",version=\"\",code=\"404\"} 1")
        );
        assert!(text.contains("kiln_serve_batch_size_bucket{model=\"mnist\",le=\"2\"} 0"));
        assert!(text.contains("kiln_serve_batch_size_bucket{model=\"mnist\",le=\"4\"} 1"));
        assert!(text.contains("kiln_serve_batch_size_bucket{model=\"mnist\",le=\"64\"} 2"));
        assert!(text.contains("kiln_serve_batch_size_bucket{model=\"mnist\",le=\"+Inf\"} 2"));
        assert!(text.contains("kiln_serve_batch_size_sum{model=\"mnist\"} 43"));
        assert_eq!(escape("a\"b\\"), "a\\\"b\\\\");
    }
}
