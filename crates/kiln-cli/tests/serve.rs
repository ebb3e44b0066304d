//! `kiln export` and `kiln serve` as a user runs them: export a run, serve it, predict over
//! HTTP, and stop with SIGTERM while a request is in flight (it gets its answer, the process
//! exits 0). The run's weights are written directly (no training), so this needs no data.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::scratch;

/// A run directory with a small CNN and seeded weights.
fn run_dir(dir: &Path) -> std::path::PathBuf {
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let text = r#"name = "tiny-cnn"
[data]
[model]
layers = [
  { type = "Input", shape = [4, 4, 1] },
  { type = "Conv2D", filters = 2, kernel_size = 3, padding = "same", activation = "relu" },
  { type = "Flatten" },
  { type = "Dense", units = 3, activation = "softmax" },
]
[compile]
optimizer = "sgd"
loss = "sparse_categorical_crossentropy"
"#;
    let cfg = kiln::RunConfig::from_toml_str(text).unwrap();
    let model = kiln::Model::new(
        "tiny-cnn",
        cfg.model.clone(),
        cfg.compile.clone(),
        5,
        kiln::device::resolve(kiln::DeviceKind::Cpu).unwrap(),
    );
    model.save_weights(&run.join("model.safetensors")).unwrap();
    std::fs::write(run.join("config.toml"), cfg.to_toml()).unwrap();
    run
}

/// POSTs `body` to `path` over a fresh connection; returns the status and body.
fn post(port: u16, path: &str, body: &str) -> (u16, String) {
    request(port, "POST", path, body)
}

/// Sends `method path` with `body` over a fresh connection; returns the status and body.
fn request(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (
        status,
        out.split("\r\n\r\n").nth(1).unwrap_or("").to_string(),
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn export_serve_predict_and_stop_gracefully_on_sigterm() {
    let dir = scratch("serve");
    let run = run_dir(&dir);
    let kiln = env!("CARGO_BIN_EXE_kiln");
    let out = Command::new(kiln)
        .args(["export", run.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version = run.join("export/tiny-cnn/1");
    for f in [
        "model.onnx",
        "model.safetensors",
        "model.toml",
        "signature.json",
    ] {
        assert!(version.join(f).is_file(), "{f}");
    }
    // A version that exists is refused.
    let again = Command::new(kiln)
        .args(["export", run.to_str().unwrap(), "--version", "1"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));

    let batching = dir.join("batching.txt");
    std::fs::write(&batching, "batch_timeout_micros { value: 2000000 }\n").unwrap();
    let port = free_port();
    let mut server = Command::new(kiln)
        .args([
            "serve",
            "--model-name",
            "tiny-cnn",
            "--model-base-path",
            run.join("export/tiny-cnn").to_str().unwrap(),
            "--rest-api-port",
            &port.to_string(),
            "--batching-parameters-file",
            batching.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "kiln serve did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let image: Vec<Vec<[f32; 1]>> = (0..4)
        .map(|h| (0..4).map(|w| [(h * 4 + w) as f32 / 16.0]).collect())
        .collect();
    let body = serde_json::json!({ "instances": [image] }).to_string();
    let expected = kiln::export::Servable::load(
        &version,
        kiln::device::resolve(kiln::DeviceKind::Cpu).unwrap(),
    )
    .unwrap()
    .predict((0..16).map(|i| i as f32 / 16.0).collect(), 1)
    .unwrap();

    // The request waits 2 s in its batch; SIGTERM arrives once the metrics show it queued.
    let in_flight = std::thread::spawn(move || post(port, "/v1/models/tiny-cnn:predict", &body));
    let start = Instant::now();
    while !request(port, "GET", "/monitoring/prometheus/metrics", "")
        .1
        .contains("\nkiln_serve_queue_batches 1\n")
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the request never reached the batch queue"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let (code, response) = in_flight.join().unwrap();
    assert_eq!(code, 200, "{response}");
    let v: serde_json::Value = serde_json::from_str(&response).unwrap();
    let got: Vec<f32> = v["predictions"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(got, expected);
    let status = server.wait().unwrap();
    assert_eq!(status.code(), Some(0), "graceful stop exits 0");
}
