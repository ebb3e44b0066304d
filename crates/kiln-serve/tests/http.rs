//! kiln serve over real HTTP (reqwest, and raw TCP for requests clients would normalize):
//! every endpoint and error code, hostile bodies, batching, concurrency and hot reload.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use kiln_serve::{BatchingConfig, ModelConfig};
use serde_json::{Value, json};

fn post(c: &Client, url: &str, body: &Value) -> (u16, Value) {
    let r = c.post(url, body.to_string());
    (r.status, r.json())
}

fn get(c: &Client, url: &str) -> (u16, Value) {
    let r = c.get(url);
    (r.status, r.json())
}

/// Waits until the server's metrics show `n` batches waiting in the queue.
fn wait_for_queued_batches(server: &kiln_serve::Server, n: usize) {
    let c = client();
    let metrics = url(server, "/monitoring/prometheus/metrics");
    let want = format!("\nkiln_serve_queue_batches {n}\n");
    wait_until(&format!("{n} queued batch(es)"), || {
        c.get(&metrics).text().contains(&want)
    });
}

/// Sends `request` as is over TCP and returns the status code and body.
fn raw(server: &kiln_serve::Server, request: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(server.addr()).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[test]
fn status_metadata_and_predict_in_both_formats() {
    let dir = scratch("basic");
    let v1 = export(&dir, "cnn", 1, 1);
    let server = start(config(vec![ModelConfig::new("cnn", dir.join("cnn"))], None));
    let c = client();

    let (code, body) = get(&c, &url(&server, "/v1/models/cnn"));
    assert_eq!(code, 200);
    assert_eq!(
        body,
        json!({"model_version_status": [{"version": "1", "state": "AVAILABLE",
            "status": {"error_code": "OK", "error_message": ""}}]})
    );
    assert_eq!(get(&c, &url(&server, "/v1/models/cnn/versions/1")).0, 200);

    let (code, meta) = get(&c, &url(&server, "/v1/models/cnn/metadata"));
    assert_eq!(code, 200);
    assert_eq!(meta["model_spec"]["version"], "1");
    let sig = &meta["metadata"]["signature_def"]["signature_def"]["serving_default"];
    let dims: Vec<&str> = sig["inputs"]["input_layer"]["tensor_shape"]["dim"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["size"].as_str().unwrap())
        .collect();
    assert_eq!(dims, ["-1", "6", "5", "2"]);
    assert_eq!(sig["outputs"]["output_0"]["dtype"], "DT_FLOAT");

    let x = examples(3, 0);
    let expected = local_predict(&v1, &x, 3);
    let predict = url(&server, "/v1/models/cnn:predict");
    let (code, body) = post(&c, &predict, &json!({"instances": instances(&x, 3)}));
    assert_eq!(code, 200, "{body}");
    assert_eq!(rows(&body, "predictions"), expected, "bit for bit");
    let (code, body) = post(
        &c,
        &predict,
        &json!({"signature_name": "serving_default", "inputs": {"input_layer": instances(&x, 3)}}),
    );
    assert_eq!(code, 200);
    assert_eq!(rows(&body, "outputs"), expected);
    let named: Vec<Value> = instances(&x, 3)
        .as_array()
        .unwrap()
        .iter()
        .map(|i| json!({"input_layer": i}))
        .collect();
    let (_, body) = post(
        &c,
        &url(&server, "/v1/models/cnn/versions/1:predict"),
        &json!({"instances": named}),
    );
    assert_eq!(rows(&body, "predictions"), expected);

    // Metrics count the requests by model, version and code.
    let text = c
        .get(&url(&server, "/monitoring/prometheus/metrics"))
        .text();
    // Metadata and three predictions name their version; the status requests do not.
    assert!(
        text.contains("kiln_serve_requests_total{model=\"cnn\",version=\"1\",code=\"200\"} 4"),
        "{text}"
    );
    assert!(text.contains("kiln_serve_requests_total{model=\"cnn\",version=\"\",code=\"200\"} 2"));
    assert!(
        text.contains("kiln_serve_batch_size_count{model=\"cnn\"} 3"),
        "{text}"
    );
    assert!(text.contains("kiln_serve_model_versions_available{model=\"cnn\"} 1"));
    assert_eq!(get(&c, &url(&server, "/v2/health/live")).0, 200);
    assert_eq!(get(&c, &url(&server, "/v2/health/ready")).0, 200);
    server.stop().unwrap();
}

#[test]
fn errors_have_tf_servings_bodies_and_codes() {
    let dir = scratch("errors");
    export(&dir, "cnn", 1, 1);
    let server = start(config(vec![ModelConfig::new("cnn", dir.join("cnn"))], None));
    let c = client();
    let predict = url(&server, "/v1/models/cnn:predict");
    let send = |body: &str| {
        let r = c.post(&predict, body.to_string());
        (
            r.status,
            r.json()["error"].as_str().unwrap_or_default().to_string(),
        )
    };
    let good = json!({"instances": instances(&examples(1, 0), 1)}).to_string();
    let cases = [
        (&good[..good.len() - 3], 400, "malformed JSON"),
        (r#"{"instances": [NaNo]}"#, 400, "malformed JSON"),
        (
            r#"{"instances": [[1, 2]], "instances": [[1, 2]]}"#,
            400,
            "the key \"instances\" is given twice",
        ),
        (
            r#"{"instances": [[1, 2]], "inputs": [[1, 2]]}"#,
            400,
            "Only one of",
        ),
        (
            r#"{"signature_name": "serving_default"}"#,
            400,
            "Missing 'inputs' or 'instances'",
        ),
        (
            r#"{"instances": [[1, 2, 3]]}"#,
            400,
            "expects shape [-1, 6, 5, 2]",
        ),
        (r#"{"instances": [["a"]]}"#, 400, "DT_FLOAT"),
    ];
    for (body, code, msg) in cases {
        let (got, error) = send(body);
        assert_eq!(got, code, "{body}: {error}");
        assert!(error.contains(msg), "{body}: {error}");
    }
    let (code, error) = send(&good.replace(
        "{\"instances\"",
        "{\"signature_name\": \"x\", \"instances\"",
    ));
    assert_eq!(
        (code, error.contains("\"x\" not found")),
        (400, true),
        "{error}"
    );
    // 10^6 nested lists: an error, and the server lives on.
    let deep = format!(
        "{{\"instances\": {}{}}}",
        "[".repeat(1_000_000),
        "]".repeat(1_000_000)
    );
    assert_eq!(send(&deep).0, 400);
    // A 100 MB body: 413, read back by the client.
    let big = vec![b' '; 100 << 20];
    let r = c.post(&predict, big);
    assert_eq!(r.status, 413);
    let v = r.json();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("larger than the limit"),
        "{v}"
    );
    assert_eq!(send(&good).0, 200, "still serving");

    // 404: unknown model, version, label, path.
    for (path, code) in [
        ("/v1/models/other:predict", 404),
        ("/v1/models/cnn/versions/7:predict", 404),
        ("/v1/models/cnn/labels/stable:predict", 404),
        ("/v1/models/cnn/versions/7", 404),
        ("/v1/models/other", 404),
        ("/nope", 404),
    ] {
        let r = if path.ends_with(":predict") {
            c.post(&url(&server, path), good.clone())
        } else {
            c.get(&url(&server, path))
        };
        assert_eq!(r.status, code, "{path}");
        let v = r.json();
        assert!(v["error"].is_string(), "{path}: {v}");
    }
    // 400: names, versions and labels outside [A-Za-z0-9_.-] or with "..", sent raw so that
    // no client normalizes them away.
    for path in [
        "/v1/models/..%2F..%2Fetc%2Fpasswd:predict",
        "/v1/models/../../etc/passwd:predict",
        "/v1/models/cnn/versions/..:predict",
        "/v1/models/cnn/labels/a..b/metadata",
        "/v1/models/c%00nn",
        "/v1/models/cnn/versions/01",
    ] {
        let method = if path.ends_with(":predict") {
            "POST"
        } else {
            "GET"
        };
        let (code, body) = raw(
            &server,
            &format!(
                "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            ),
        );
        assert_eq!(code, 400, "{path}: {body}");
        assert!(body.contains("\"error\""), "{path}: {body}");
    }
    // Wrong method.
    assert_eq!(c.get(&predict).status, 405);
    let text = c
        .get(&url(&server, "/monitoring/prometheus/metrics"))
        .text();
    assert!(text.contains("code=\"413\"} 1"), "{text}");
    // Names that are not served are counted without their name.
    assert!(
        text.contains("model=\"\",version=\"\",code=\"404\"} 2"),
        "{text}"
    );
    assert!(!text.contains("other"), "{text}");
}

#[test]
fn a_bearer_token_guards_the_api_but_not_health() {
    let dir = scratch("auth");
    export(&dir, "cnn", 1, 1);
    let mut cfg = config(vec![ModelConfig::new("cnn", dir.join("cnn"))], None);
    cfg.auth_token = Some("s3cret-token".into());
    let server = start(cfg);
    let c = client();
    let status = url(&server, "/v1/models/cnn");
    let r = c.get(&status);
    assert_eq!(r.status, 401);
    assert_eq!(r.headers["www-authenticate"], "Bearer");
    assert!(r.json()["error"].as_str().unwrap().contains("bearer token"));
    assert_eq!(c.get_with_token(&status, "s3cret-tokeN").status, 401);
    assert_eq!(c.get_with_token(&status, "s3cret-token").status, 200);
    let metrics = url(&server, "/monitoring/prometheus/metrics");
    assert_eq!(c.get(&metrics).status, 401);
    assert_eq!(c.get_with_token(&metrics, "s3cret-token").status, 200);
    assert_eq!(get(&c, &url(&server, "/v2/health/live")).0, 200);
}

#[test]
fn a_full_queue_is_429() {
    let dir = scratch("queue");
    export(&dir, "cnn", 1, 1);
    let batching = BatchingConfig {
        max_batch_size: 2,
        batch_timeout_micros: 1_500_000,
        max_enqueued_batches: 1,
        num_batch_threads: 1,
    };
    let server = start(config(
        vec![ModelConfig::new("cnn", dir.join("cnn"))],
        Some(batching),
    ));
    let predict = url(&server, "/v1/models/cnn:predict");
    // One example opens the only batch the queue may hold; it waits 1.5 s for company.
    let first = {
        let predict = predict.clone();
        std::thread::spawn(move || {
            let body = json!({"instances": instances(&examples(1, 0), 1)});
            post(&client(), &predict, &body).0
        })
    };
    wait_for_queued_batches(&server, 1);
    // Two examples do not fit its remaining room: a second batch, over the limit.
    let (code, body) = post(
        &client(),
        &predict,
        &json!({"instances": instances(&examples(2, 1), 2)}),
    );
    assert_eq!(code, 429, "{body}");
    assert!(body["error"].as_str().unwrap().contains("queue"), "{body}");
    assert_eq!(first.join().unwrap(), 200);
}

#[test]
fn batched_requests_return_exactly_what_they_return_alone() {
    let dir = scratch("batching");
    let v1 = export(&dir, "cnn", 3, 1);
    let batching = BatchingConfig {
        max_batch_size: 64,
        batch_timeout_micros: 200_000,
        max_enqueued_batches: 100,
        num_batch_threads: 1,
    };
    let server = start(config(
        vec![ModelConfig::new("cnn", dir.join("cnn"))],
        Some(batching),
    ));
    let predict = url(&server, "/v1/models/cnn:predict");
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let predict = predict.clone();
            std::thread::spawn(move || {
                let n = 1 + i % 3;
                let x = examples(n, i);
                let (code, body) =
                    post(&client(), &predict, &json!({"instances": instances(&x, n)}));
                assert_eq!(code, 200, "{body}");
                (x, n, rows(&body, "predictions"))
            })
        })
        .collect();
    for t in threads {
        let (x, n, got) = t.join().unwrap();
        assert_eq!(
            got,
            local_predict(&v1, &x, n),
            "a batched request, bit for bit"
        );
    }
    // They did share forward passes: fewer batches than requests.
    let text = client()
        .get(&url(&server, "/monitoring/prometheus/metrics"))
        .text();
    let count: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("kiln_serve_batch_size_count{model=\"cnn\"} "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(count < 16, "{count} batches for 16 requests\n{text}");
}

#[test]
fn no_version_is_503_and_a_broken_version_never_replaces_a_working_one() {
    let dir = scratch("versions");
    let staging = scratch("versions-staging");
    let base = dir.join("cnn");
    std::fs::create_dir_all(&base).unwrap();
    let server = start(config(vec![ModelConfig::new("cnn", &base)], None));
    let c = client();
    let predict = url(&server, "/v1/models/cnn:predict");
    let x = examples(2, 5);
    let body = json!({"instances": instances(&x, 2)});
    let (code, v) = post(&c, &predict, &body);
    assert_eq!(code, 503, "{v}");
    assert!(v["error"].as_str().unwrap().contains("no version"), "{v}");
    assert_eq!(get(&c, &url(&server, "/v2/health/ready")).0, 503);

    // Version 1 appears (renamed into place, as kiln export does): served within a poll.
    let v1 = export(&staging, "cnn", 1, 1);
    std::fs::rename(&v1, base.join("1")).unwrap();
    let v1 = base.join("1");
    wait_until("version 1", || post(&c, &predict, &body).0 == 200);
    let want1 = local_predict(&v1, &x, 2);

    // Version 2 without its weights: reported, and version 1 keeps serving.
    let v2 = export(&staging, "cnn", 2, 2);
    std::fs::rename(v2.join("model.safetensors"), staging.join("weights-2")).unwrap();
    std::fs::rename(&v2, base.join("2")).unwrap();
    wait_until("version 2's failure", || {
        get(&c, &url(&server, "/v1/models/cnn")).1["model_version_status"][0]["status"]["error_code"]
            == "UNKNOWN"
    });
    let (_, status) = get(&c, &url(&server, "/v1/models/cnn"));
    let list = status["model_version_status"].as_array().unwrap();
    assert_eq!(list[0]["version"], "2");
    assert_eq!(list[0]["state"], "END");
    assert!(
        list[0]["status"]["error_message"]
            .as_str()
            .unwrap()
            .contains("model.safetensors"),
        "{status}"
    );
    assert_eq!(
        (&list[1]["version"], &list[1]["state"]),
        (&json!("1"), &json!("AVAILABLE"))
    );
    let (code, got) = post(&c, &predict, &body);
    assert_eq!(code, 200);
    assert_eq!(rows(&got, "predictions"), want1);
    let (code, v) = post(
        &c,
        &url(&server, "/v1/models/cnn/versions/2:predict"),
        &body,
    );
    assert_eq!(code, 503, "{v}");

    // Its weights arrive: it loads, then version 1 is unloaded.
    std::fs::rename(staging.join("weights-2"), base.join("2/model.safetensors")).unwrap();
    let want2 = local_predict(&base.join("2"), &x, 2);
    assert_ne!(want1, want2);
    wait_until("version 2", || {
        rows(&post(&c, &predict, &body).1, "predictions") == want2
    });
    wait_until("version 1 unloaded", || {
        get(&c, &url(&server, "/v1/models/cnn")).1["model_version_status"][1]["state"] == "END"
    });
    assert_eq!(
        post(
            &c,
            &url(&server, "/v1/models/cnn/versions/1:predict"),
            &body
        )
        .0,
        503
    );
}

#[test]
fn hot_reload_under_load_fails_no_request() {
    let dir = scratch("reload");
    let staging = scratch("reload-staging");
    let v1 = export(&dir, "cnn", 1, 1);
    let server = Arc::new(start(config(
        vec![ModelConfig::new("cnn", dir.join("cnn"))],
        Some(BatchingConfig {
            batch_timeout_micros: 1000,
            ..Default::default()
        }),
    )));
    let x = examples(1, 9);
    let want1 = local_predict(&v1, &x, 1);
    let predict = url(&server, "/v1/models/cnn:predict");
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed, saw2) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let v2_dir = staging.join("cnn").join("2");
    let want2 = {
        let v2 = export(&staging, "cnn", 2, 2);
        local_predict(&v2, &x, 1)
    };
    assert_ne!(want1, want2);
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (predict, stop, ok, failed, saw2) = (
                predict.clone(),
                stop.clone(),
                ok.clone(),
                failed.clone(),
                saw2.clone(),
            );
            let (want1, want2) = (want1.clone(), want2.clone());
            let body = json!({"instances": instances(&x, 1)});
            std::thread::spawn(move || {
                let c = client();
                while !stop.load(Ordering::Relaxed) {
                    let (code, v) = post(&c, &predict, &body);
                    let got = if code == 200 {
                        rows(&v, "predictions")
                    } else {
                        vec![]
                    };
                    if got == want1 {
                        ok.fetch_add(1, Ordering::Relaxed);
                    } else if got == want2 {
                        ok.fetch_add(1, Ordering::Relaxed);
                        saw2.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    wait_until("version 1 under load", || ok.load(Ordering::Relaxed) > 20);
    std::fs::rename(&v2_dir, dir.join("cnn").join("2")).unwrap();
    wait_until("version 2 under load", || saw2.load(Ordering::Relaxed) > 20);
    let c = client();
    wait_until("version 1 unloaded under load", || {
        get(&c, &url(&server, "/v1/models/cnn")).1["model_version_status"][1]["state"] == "END"
    });
    let served = ok.load(Ordering::Relaxed);
    wait_until("requests after the unload", || {
        ok.load(Ordering::Relaxed) > served + 20
    });
    stop.store(true, Ordering::Relaxed);
    for t in clients {
        t.join().unwrap();
    }
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "failed requests during the reload"
    );
    assert!(ok.load(Ordering::Relaxed) > 40);
    let (_, status) = get(&client(), &url(&server, "/v1/models/cnn"));
    assert_eq!(status["model_version_status"][0]["state"], "AVAILABLE");
    assert_eq!(status["model_version_status"][1]["state"], "END");
}

#[test]
fn stopping_lets_requests_in_flight_finish() {
    let dir = scratch("graceful");
    let v1 = export(&dir, "cnn", 1, 1);
    let server = start(config(
        vec![ModelConfig::new("cnn", dir.join("cnn"))],
        // The request waits 2 s in its batch: the test sees it queued and stops meanwhile.
        Some(BatchingConfig {
            batch_timeout_micros: 2_000_000,
            ..Default::default()
        }),
    ));
    let predict = url(&server, "/v1/models/cnn:predict");
    let x = examples(1, 2);
    let in_flight = {
        let body = json!({"instances": instances(&x, 1)});
        std::thread::spawn(move || post(&client(), &predict, &body))
    };
    wait_for_queued_batches(&server, 1);
    let addr = server.addr();
    server.stop().unwrap();
    let (code, body) = in_flight.join().unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(rows(&body, "predictions"), local_predict(&v1, &x, 1));
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "no longer listening"
    );
}

/// A model whose outputs are affine in its inputs, so that non-finite inputs give non-finite
/// outputs.
const LINEAR: &str = r#"[
  { type = "Input", shape = [2] },
  { type = "Dense", units = 2 },
]"#;

/// Parses `{"predictions":[[...],...]}` with TF Serving's bare non-finite tokens.
fn numbers_with_tokens(body: &str) -> Vec<f32> {
    let inner = body
        .strip_prefix("{\"predictions\":[")
        .and_then(|b| b.strip_suffix("]}"))
        .unwrap_or_else(|| panic!("not a predictions body: {body}"));
    inner
        .split(['[', ']', ','])
        .filter(|t| !t.is_empty())
        .map(|t| match t {
            "NaN" => f32::NAN,
            "Infinity" => f32::INFINITY,
            "-Infinity" => f32::NEG_INFINITY,
            n => n.parse().unwrap_or_else(|_| panic!("{n:?} in {body}")),
        })
        .collect()
}

/// A keep-alive request with `body` (sent as given) to `path`.
fn request(method: &str, path: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n{headers}\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

#[test]
fn non_finite_values_are_tf_servings_bare_tokens_both_ways() {
    let dir = scratch("nonfinite");
    let v1 = export_layers(&dir, "lin", LINEAR, 3, 1);
    let server = start(config(vec![ModelConfig::new("lin", dir.join("lin"))], None));
    let x = [
        f32::NAN,
        0.0,
        f32::INFINITY,
        0.0,
        f32::NEG_INFINITY,
        1.0,
        0.5,
        -2.0,
    ];
    let expected = local_predict(&v1, &x, 4);
    assert!(expected.iter().any(|v| v.is_nan()), "{expected:?}");
    assert!(expected.iter().any(|v| v.is_infinite()), "{expected:?}");
    let body = r#"{"instances": [[NaN, 0], [Infinity, 0], [-Infinity, 1], [0.5, -2]]}"#;
    let r = client().post(&url(&server, "/v1/models/lin:predict"), body);
    assert_eq!(r.status, 200, "{}", r.text());
    let got = numbers_with_tokens(&r.text());
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(&expected) {
        assert!(
            g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
            "{got:?} vs {expected:?}"
        );
    }
}

#[test]
fn names_that_are_not_served_do_not_grow_the_metrics() {
    let dir = scratch("metrics-names");
    export(&dir, "cnn", 1, 1);
    let server = start(config(vec![ModelConfig::new("cnn", dir.join("cnn"))], None));
    let c = client();
    let metrics = url(&server, "/monitoring/prometheus/metrics");
    let body = json!({"instances": instances(&examples(1, 0), 1)}).to_string();
    assert_eq!(
        c.post(&url(&server, "/v1/models/first:predict"), body.clone())
            .status,
        404
    );
    let before = c.get(&metrics).text();
    for i in 0..300 {
        let path = format!("/v1/models/made-up-{i}:predict");
        assert_eq!(c.post(&url(&server, &path), body.clone()).status, 404);
        assert_eq!(
            c.get(&url(&server, &format!("/v1/models/made-up-{i}")))
                .status,
            404
        );
    }
    let after = c.get(&metrics).text();
    assert!(
        !after.contains("made-up") && !after.contains("first"),
        "{after}"
    );
    assert!(
        after.contains("kiln_serve_requests_total{model=\"\",version=\"\",code=\"404\"} 601"),
        "{after}"
    );
    // The same lines; only counts grew by a few digits.
    assert_eq!(before.lines().count(), after.lines().count(), "{after}");
    assert!(
        after.len() < before.len() + 100,
        "{} -> {}",
        before.len(),
        after.len()
    );
}

#[test]
fn stalled_headers_bodies_and_idle_connections_are_closed() {
    let dir = scratch("timeouts");
    export(&dir, "cnn", 1, 1);
    let mut cfg = config(vec![ModelConfig::new("cnn", dir.join("cnn"))], None);
    cfg.header_read_timeout = Duration::from_millis(500);
    cfg.body_read_timeout = Duration::from_millis(500);
    let server = start(cfg);
    let within = Duration::from_secs(20);
    // Part of the headers.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.write_all(b"POST /v1/models/cnn:predict HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    assert!(closed_within(&mut s, within), "half-sent headers kept open");
    // Nothing at all (an idle connection).
    let mut s = TcpStream::connect(server.addr()).unwrap();
    assert!(closed_within(&mut s, within), "idle connection kept open");
    // Part of the body: 408, then closed.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.write_all(b"POST /v1/models/cnn:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"instances\": [")
        .unwrap();
    s.set_read_timeout(Some(within)).unwrap();
    let r = read_response(&mut s).expect("a 408 response");
    assert_eq!(r.status, 408, "{}", r.body);
    assert!(r.body.contains("--body-read-timeout-seconds"), "{}", r.body);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(closed_within(&mut s, within), "stalled body kept open");
    // A keep-alive connection that goes quiet after a request is closed too.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.write_all(&request("GET", "/v1/models/cnn", "", b""))
        .unwrap();
    s.set_read_timeout(Some(within)).unwrap();
    assert_eq!(read_response(&mut s).unwrap().status, 200);
    assert!(closed_within(&mut s, within), "idle keep-alive kept open");
}

#[test]
fn a_request_followed_by_a_half_close_gets_its_response() {
    let dir = scratch("halfclose");
    export(&dir, "cnn", 1, 1);
    let server = start(config(vec![ModelConfig::new("cnn", dir.join("cnn"))], None));
    let body = json!({"instances": instances(&examples(2, 0), 2)}).to_string();
    for (method, path, body, want) in [
        ("GET", "/v1/models/cnn", "", 200),
        ("POST", "/v1/models/cnn:predict", body.as_str(), 200),
        ("POST", "/v1/models/cnn:predict", "{\"instances\": [1", 400),
    ] {
        let mut s = TcpStream::connect(server.addr()).unwrap();
        s.write_all(&request(method, path, "", body.as_bytes()))
            .unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let r = read_response(&mut s).unwrap_or_else(|| panic!("{method} {path}: no response"));
        assert_eq!(r.status, want, "{method} {path}: {}", r.body);
    }
}

#[test]
fn keep_alive_stays_correct_after_every_error() {
    let dir = scratch("keepalive");
    export(&dir, "cnn", 1, 1);
    let mut cfg = config(vec![ModelConfig::new("cnn", dir.join("cnn"))], None);
    cfg.auth_token = Some("t0ken".into());
    let server = start(cfg);
    let auth = "Authorization: Bearer t0ken\r\n";
    let good = json!({"instances": instances(&examples(1, 0), 1)}).to_string();
    // Answered before the body was read (unknown model, no token, wrong method, bad
    // encoding): `Connection: close`, then the server closes, though the body is incomplete.
    for (path, headers) in [
        ("/v1/models/nope:predict", auth.to_string()),
        ("/v1/models/cnn:predict", String::new()),
        ("/v1/models/cnn", auth.to_string()),
        (
            "/v1/models/cnn:predict",
            format!("{auth}Content-Encoding: br\r\n"),
        ),
    ] {
        let mut s = TcpStream::connect(server.addr()).unwrap();
        let mut req = request("POST", path, &headers, good.as_bytes());
        req.truncate(req.len() - good.len() / 2);
        s.write_all(&req).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let r = read_response(&mut s).unwrap();
        assert!(r.status >= 400 && r.status < 500, "{path}: {}", r.status);
        assert_eq!(
            r.header("connection"),
            Some("close"),
            "{path}: {}",
            r.status
        );
        assert!(closed_within(&mut s, Duration::from_secs(20)), "{path}");
    }
    // Errors after the whole body was read keep the connection, and the next request on it
    // gets its own answer, every time.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    for i in 0..50 {
        for (body, want) in [
            (&good[..good.len() - 5], 400),
            ("{\"instances\": [[1]]}", 400),
            (good.as_str(), 200),
        ] {
            s.write_all(&request(
                "POST",
                "/v1/models/cnn:predict",
                auth,
                body.as_bytes(),
            ))
            .unwrap();
            let r = read_response(&mut s).unwrap_or_else(|| panic!("round {i}: closed"));
            assert_eq!(r.status, want, "round {i}: {}", r.body);
            assert_eq!(r.header("connection"), None, "round {i}");
        }
    }
}

#[test]
fn gzip_bodies_are_read_within_the_body_limit() {
    use flate2::{Compression, write::GzEncoder};
    let gzip = |data: &[u8]| {
        let mut e = GzEncoder::new(Vec::new(), Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    };
    let dir = scratch("gzip");
    let v1 = export(&dir, "cnn", 1, 1);
    let mut cfg = config(vec![ModelConfig::new("cnn", dir.join("cnn"))], None);
    cfg.max_body_bytes = 1 << 20;
    let server = start(cfg);
    let x = examples(2, 1);
    let body = json!({"instances": instances(&x, 2)}).to_string();
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut send = |headers: &str, body: &[u8]| {
        s.write_all(&request("POST", "/v1/models/cnn:predict", headers, body))
            .unwrap();
        read_response(&mut s).unwrap()
    };
    let r = send("Content-Encoding: gzip\r\n", &gzip(body.as_bytes()));
    assert_eq!(r.status, 200, "{}", r.body);
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(rows(&v, "predictions"), local_predict(&v1, &x, 2));
    let r = send("Content-Encoding: GZIP\r\n", &gzip(body.as_bytes()));
    assert_eq!(r.status, 200, "{}", r.body);
    // 16 MiB of spaces in 16 KiB: refused once 1 MiB is out, not inflated.
    let bomb = gzip(&vec![b' '; 16 << 20]);
    assert!(bomb.len() < 1 << 20);
    let r = send("Content-Encoding: gzip\r\n", &bomb);
    assert_eq!(r.status, 413, "{}", r.body);
    assert!(r.body.contains("after gzip decompression"), "{}", r.body);
    let r = send("Content-Encoding: gzip\r\n", body.as_bytes());
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("not valid gzip"), "{}", r.body);
    let mut cut = gzip(body.as_bytes());
    cut.truncate(cut.len() - 10);
    assert_eq!(send("Content-Encoding: gzip\r\n", &cut).status, 400);
    let r = send("Content-Encoding: deflate\r\n", body.as_bytes());
    assert_eq!(r.status, 415, "{}", r.body);
}
