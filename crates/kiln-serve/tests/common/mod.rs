//! What the HTTP tests share: tiny exported models (seeded weights, no training) and servers on
//! free ports.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::time::Duration;

use burn::prelude::Device;
use kiln::export::{ExportFormat, ExportOptions, Servable};
use kiln_serve::{BatchingConfig, ModelConfig, ServeConfig, Server};

/// A small CNN over `[6, 5, 2]` images with every layer kind kiln serves.
pub const CNN: &str = r#"[
  { type = "Input", shape = [6, 5, 2] },
  { type = "Conv2D", filters = 4, kernel_size = 3, padding = "same", activation = "relu" },
  { type = "BatchNormalization" },
  { type = "MaxPooling2D", pool_size = 2, padding = "same" },
  { type = "Dropout", rate = 0.25 },
  { type = "Flatten" },
  { type = "Dense", units = 16, activation = "relu" },
  { type = "Dense", units = 3, activation = "softmax" },
]"#;

/// Elements of one CNN example.
pub const PER: usize = 60;

/// An empty scratch directory for `tag`.
pub fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-serve-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A run directory under `dir` for `layers` with weights drawn from `seed`.
pub fn run_dir(dir: &Path, name: &str, layers: &str, seed: u64) -> PathBuf {
    let run = dir.join(format!("run-{name}-{seed}"));
    std::fs::create_dir_all(&run).unwrap();
    let text = format!(
        "name = \"{name}\"\n[data]\n[model]\nlayers = {layers}\n[compile]\noptimizer = \"sgd\"\n\
         loss = \"sparse_categorical_crossentropy\"\n"
    );
    let cfg = kiln::RunConfig::from_toml_str(&text).unwrap();
    let model = kiln::Model::new(
        name,
        cfg.model.clone(),
        cfg.compile.clone(),
        seed,
        Device::flex(),
    );
    model.save_weights(&run.join("model.safetensors")).unwrap();
    std::fs::write(run.join("config.toml"), cfg.to_toml()).unwrap();
    run
}

/// Exports a model named `name` (weights from `seed`) as `out/<name>/<version>`; returns the
/// version directory.
pub fn export(out: &Path, name: &str, seed: u64, version: u64) -> PathBuf {
    export_layers(out, name, CNN, seed, version)
}

/// As [`export`], for a model of `layers`.
pub fn export_layers(out: &Path, name: &str, layers: &str, seed: u64, version: u64) -> PathBuf {
    let run = run_dir(&out.join("runs"), name, layers, seed);
    kiln::export::export(
        &run,
        &ExportOptions {
            format: ExportFormat::Safetensors,
            version: Some(version),
            out: Some(out.to_path_buf()),
            name: None,
            ..Default::default()
        },
    )
    .unwrap()
    .dir
}

/// What the version directory's model predicts for `x` (`n` examples), computed locally.
pub fn local_predict(dir: &Path, x: &[f32], n: usize) -> Vec<f32> {
    Servable::load(dir, Device::flex())
        .unwrap()
        .predict(x.to_vec(), n)
        .unwrap()
}

/// Deterministic example values, distinct per `seed`.
pub fn examples(n: usize, seed: usize) -> Vec<f32> {
    (0..n * PER)
        .map(|i| (((i + seed * 7) * 7919 % 201) as f32 - 100.0) / 50.0)
        .collect()
}

/// `examples` as TF Serving's row format: `[[[[c0, c1], ...], ...], ...]`.
pub fn instances(x: &[f32], n: usize) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = (0..n)
        .map(|e| {
            let img = &x[e * PER..(e + 1) * PER];
            serde_json::json!(
                (0..6)
                    .map(|h| (0..5)
                        .map(|w| vec![img[(h * 5 + w) * 2], img[(h * 5 + w) * 2 + 1]])
                        .collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            )
        })
        .collect();
    serde_json::Value::Array(rows)
}

/// The rows of a `predictions` / `outputs` response as float32.
pub fn rows(body: &serde_json::Value, key: &str) -> Vec<f32> {
    body[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {body}"))
        .iter()
        .flat_map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
        })
        .collect()
}

/// Server settings for `models` on a free port, polling every 100 ms.
pub fn config(models: Vec<ModelConfig>, batching: Option<BatchingConfig>) -> ServeConfig {
    ServeConfig {
        port: 0,
        models,
        batching,
        poll_interval: Duration::from_millis(100),
        num_request_threads: 2,
        ..Default::default()
    }
}

/// Starts a server.
pub fn start(cfg: ServeConfig) -> Server {
    Server::start(cfg).unwrap()
}

/// `http://addr`.
pub fn url(server: &Server, path: &str) -> String {
    format!("http://{}{path}", server.addr())
}

/// An HTTP response: status, headers, body.
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A reqwest client driven by its own single-threaded tokio runtime, for blocking tests.
pub struct Client {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
}

impl Client {
    /// Sends `request` and reads the whole response.
    pub fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        self.rt.block_on(async {
            let r = request.send().await.unwrap();
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            let body = r.bytes().await.unwrap().to_vec();
            Reply {
                status,
                headers,
                body,
            }
        })
    }

    /// GET `url`.
    pub fn get(&self, url: &str) -> Reply {
        self.send(self.http.get(url))
    }

    /// GET `url` with a bearer token.
    pub fn get_with_token(&self, url: &str, token: &str) -> Reply {
        self.send(self.http.get(url).bearer_auth(token))
    }

    /// POST `body` to `url`.
    pub fn post(&self, url: &str, body: impl Into<reqwest::Body>) -> Reply {
        self.send(
            self.http
                .post(url)
                .header("content-type", "application/json")
                .body(body),
        )
    }
}

/// A client.
pub fn client() -> Client {
    Client {
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
    }
}

/// Polls `f` every 50 ms for up to 20 s until it is true.
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A response read off a raw connection: status, headers (names lowercased), body.
pub struct RawReply {
    /// The status code.
    pub status: u16,
    /// `name: value` lines, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body (`Content-Length` bytes).
    pub body: String,
}

impl RawReply {
    /// The value of header `name` (lowercase), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one HTTP/1.1 response (with a `Content-Length` body) from `s`; `None` when the
/// connection closes before a whole response arrived.
pub fn read_response(s: &mut std::net::TcpStream) -> Option<RawReply> {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.get(9..12)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    Some(RawReply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// Waits (up to `within`) for the server to close `s`: true when it did (end of stream or a
/// reset), false when the connection was still open at the deadline. Bytes sent meanwhile
/// are dropped.
pub fn closed_within(s: &mut std::net::TcpStream, within: Duration) -> bool {
    use std::io::Read;
    let deadline = std::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}
