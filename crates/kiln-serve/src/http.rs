//! The HTTP endpoints: TF Serving's REST API v1 (https://www.tensorflow.org/tfx/serving/api_rest),
//! KServe v2's health checks and Prometheus metrics.
//!
//! | method | path | |
//! |---|---|---|
//! | GET | `/v1/models/{name}[/versions/{v} \| /labels/{l}]` | version status |
//! | GET | `/v1/models/{name}[/versions/{v} \| /labels/{l}]/metadata` | signature |
//! | POST | `/v1/models/{name}[/versions/{v} \| /labels/{l}]:predict` | predict |
//! | GET | `/monitoring/prometheus/metrics` | metrics |
//! | GET | `/v2/health/live`, `/v2/health/ready` | 200, or 503 when a model has no version loaded |
//!
//! Paths are parsed from the raw request target, before any percent-decoding, and every name,
//! version and label is checked (`[A-Za-z0-9_.-]`, no `..`): anything else is a 400.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body::Body as _;
use http_body_util::BodyExt;
use serde_json::json;

use crate::error::ApiError;
use crate::json;
use crate::metrics::Metrics;
use crate::models::{Registry, Selector};
use crate::scheduler::{Scheduler, SubmitError};

/// Bodies larger than this (and every gzip body) are parsed on a blocking thread, not on the
/// async runtime.
const PARSE_INLINE_BYTES: usize = 256 << 10;
/// After the body limit is crossed, at most this much more is read (and dropped) so that the
/// client can read the 413 instead of seeing its upload cut.
const DRAIN_BYTES: usize = 512 << 20;

/// What the handlers share.
pub struct AppState {
    /// Models and versions.
    pub registry: Arc<Registry>,
    /// Inference threads.
    pub scheduler: Arc<Scheduler>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Body limit in bytes.
    pub max_body_bytes: usize,
    /// Bearer token, if required.
    pub auth_token: Option<String>,
    /// The longest wait for the next bytes of a request body (then 408).
    pub body_read_timeout: Duration,
    /// Bounds the bodies decompressed and parsed on blocking threads at once (one per CPU), so
    /// that a burst of large or gzip bodies does not start a thread each.
    pub parse_slots: Arc<tokio::sync::Semaphore>,
}

/// The router with every endpoint.
pub fn router(state: Arc<AppState>) -> Router {
    let protected = Router::new()
        .route("/monitoring/prometheus/metrics", get(metrics))
        .fallback(model_api)
        .layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .merge(protected)
        .layer(middleware::from_fn(close_unless_read))
        .with_state(state)
}

/// A request body that records whether it was read to its end.
struct Tracked {
    inner: Body,
    finished: Arc<AtomicBool>,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.finished.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Keeps keep-alive correct after every response: when a response goes out before its
/// request's body was read to the end (an error answered early, a stalled body), it carries
/// `Connection: close` and hyper closes the connection after it, so the client never sends
/// its next request on a connection whose unread body bytes would be taken for it.
async fn close_unless_read(request: Request, next: Next) -> Response {
    let finished = Arc::new(AtomicBool::new(request.body().is_end_stream()));
    let request = request.map(|inner| {
        Body::new(Tracked {
            inner,
            finished: finished.clone(),
        })
    });
    let mut response = next.run(request).await;
    if !finished.load(Ordering::Relaxed) {
        response.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// Refuses requests without the bearer token (when one is configured) with 401. The token is
/// compared in constant time.
async fn auth(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if let Some(token) = &state.auth_token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !constant_time_eq(given.as_bytes(), token.as_bytes()) {
            return ApiError {
                status: StatusCode::UNAUTHORIZED,
                message: "missing or wrong bearer token: send `Authorization: Bearer <token>`"
                    .into(),
            }
            .into_response();
        }
    }
    next.run(request).await
}

/// A 200 response with a JSON body.
fn json_response(body: &serde_json::Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `a == b` in time that depends on the lengths only, not on where the bytes differ (so a
/// token cannot be guessed byte by byte from response times).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

async fn live() -> Response {
    json_response(&json!({ "live": true }))
}

async fn ready(State(state): State<Arc<AppState>>) -> Response {
    if state.registry.ready() {
        json_response(&json!({ "ready": true }))
    } else {
        ApiError::unavailable("not every model has a version loaded").into_response()
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// What a `/v1/models/...` path asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The model name.
    pub model: String,
    /// Which version.
    pub selector: Selector,
    /// The endpoint.
    pub op: Op,
}

/// The endpoint of a `/v1/models/...` path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Version status.
    Status,
    /// Signature metadata.
    Metadata,
    /// `:predict`.
    Predict,
}

/// Parses the raw path of a model API request.
///
/// # Errors
/// 404 for a path that is not part of the API; 400 for an invalid name, version, label or
/// method (`:classify` and `:regress` are not supported).
pub fn parse_target(path: &str) -> Result<Target, ApiError> {
    let malformed = || ApiError::not_found(format!("Malformed request: {path}"));
    let rest = path.strip_prefix("/v1/models/").ok_or_else(malformed)?;
    let mut segments: Vec<&str> = rest.split('/').collect();
    // The method suffix on the last segment: `name:predict`, `versions/2:predict`.
    let last = segments.pop().ok_or_else(malformed)?;
    let (last, method) = match last.split_once(':') {
        Some((head, m)) => (head, Some(m)),
        None => (last, None),
    };
    segments.push(last);
    let check_name = |n: &str| {
        kiln::export::check_model_name(n)
            .map_err(|m| ApiError::bad_request(format!("invalid model name: {m}")))
    };
    let model = segments[0];
    check_name(model)?;
    let (selector, tail) = match segments.get(1..) {
        Some(["versions", v, tail @ ..]) => (
            Selector::Version(kiln::export::parse_version(v).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "invalid version {v:?}: versions are positive integers without leading zeros"
                ))
            })?),
            tail,
        ),
        Some(["labels", l, tail @ ..]) => {
            crate::config::check_label(l)
                .map_err(|m| ApiError::bad_request(format!("invalid label: {m}")))?;
            (Selector::Label(l.to_string()), tail)
        }
        Some(tail) => (Selector::Latest, tail),
        None => (Selector::Latest, &[][..]),
    };
    let op = match (tail, method) {
        ([], None) => Op::Status,
        (["metadata"], None) => Op::Metadata,
        ([], Some("predict")) => Op::Predict,
        ([], Some(m @ ("classify" | "regress"))) => {
            return Err(ApiError::bad_request(format!(
                "kiln serves predict signatures only; use :predict instead of :{m}"
            )));
        }
        ([], Some(m)) => {
            return Err(ApiError::bad_request(format!(
                "unknown method :{m}; use :predict"
            )));
        }
        _ => return Err(malformed()),
    };
    Ok(Target {
        model: model.to_string(),
        selector,
        op,
    })
}

/// Every `/v1/models/...` request (and the 404 for other paths), counted in the metrics.
async fn model_api(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let started = Instant::now();
    let path = request.uri().path().to_string();
    let target = match parse_target(&path) {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let method = request.method().clone();
    let want = if target.op == Op::Predict {
        Method::POST
    } else {
        Method::GET
    };
    let result = if method != want {
        Err((
            None,
            ApiError {
                status: StatusCode::METHOD_NOT_ALLOWED,
                message: format!("{method} is not allowed on {path}; use {want}"),
            },
        ))
    } else {
        match target.op {
            Op::Status => status(&state, &target),
            Op::Metadata => metadata(&state, &target),
            Op::Predict => predict(&state, &target, request).await,
        }
    };
    let (response, version) = match result {
        Ok((r, v)) => (r, v),
        Err((v, e)) => (e.into_response(), v),
    };
    let version = version.map(|v| v.to_string()).unwrap_or_default();
    // Only configured models get their own label: names clients make up are counted under
    // `model=""`, so the metrics stay the same size whatever names are asked for.
    let model = if state.registry.serves(&target.model) {
        target.model.as_str()
    } else {
        ""
    };
    state
        .metrics
        .request(model, &version, response.status().as_u16());
    if target.op == Op::Predict {
        state
            .metrics
            .latency(model, started.elapsed().as_secs_f64());
    }
    response
}

type Outcome = Result<(Response, Option<u64>), (Option<u64>, ApiError)>;

fn status(state: &AppState, target: &Target) -> Outcome {
    let list = state.registry.status(&target.model, &target.selector)?;
    let versions: Vec<serde_json::Value> = list
        .iter()
        .map(|s| {
            json!({
                "version": s.version.to_string(),
                "state": s.state.name(),
                "status": {
                    "error_code": if s.error.is_some() { "UNKNOWN" } else { "OK" },
                    "error_message": s.error.clone().unwrap_or_default(),
                }
            })
        })
        .collect();
    Ok((
        json_response(&json!({ "model_version_status": versions })),
        None,
    ))
}

fn metadata(state: &AppState, target: &Target) -> Outcome {
    let (version, servable) = state.registry.resolve(&target.model, &target.selector)?;
    let body = json!({
        "model_spec": {
            "name": target.model,
            "signature_name": "",
            "version": version.to_string(),
        },
        "metadata": { "signature_def": servable.signature() },
    });
    Ok((json_response(&body), Some(version)))
}

impl From<ApiError> for (Option<u64>, ApiError) {
    fn from(e: ApiError) -> Self {
        (None, e)
    }
}

/// How a request body is encoded (`Content-Encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As is.
    Identity,
    /// gzip (as TF Serving accepts it).
    Gzip,
}

/// The body's `Content-Encoding`: none or `identity`, or `gzip` (`x-gzip`).
///
/// # Errors
/// 415 for any other encoding (or several).
pub fn content_encoding(headers: &HeaderMap) -> Result<Encoding, ApiError> {
    let mut values = headers.get_all(header::CONTENT_ENCODING).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Ok(Encoding::Identity);
    };
    match value
        .to_str()
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        Ok("identity" | "") => Ok(Encoding::Identity),
        Ok("gzip" | "x-gzip") => Ok(Encoding::Gzip),
        _ => Err(ApiError {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            message: format!(
                "Content-Encoding {:?} is not supported: send the body as is or gzip-compressed \
                 (Content-Encoding: gzip)",
                String::from_utf8_lossy(value.as_bytes())
            ),
        }),
    }
}

/// 413 for a body over `limit` bytes (`what`: how many were seen).
fn too_large(what: String, limit: usize) -> ApiError {
    ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        message: format!(
            "the request body ({what}) is larger than the limit of {limit} bytes \
             (kiln serve --max-body-bytes)"
        ),
    }
}

/// Decompresses a gzip body (one or more members), refusing more than `limit` bytes of output
/// as soon as they appear, so that a small body that inflates to gigabytes costs no more than
/// `limit` bytes of memory.
///
/// # Errors
/// 400 for data that is not valid gzip; 413 when it decompresses to more than `limit` bytes.
pub fn gunzip(data: &[u8], limit: usize) -> Result<Vec<u8>, ApiError> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(data)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| {
            ApiError::bad_request(format!(
                "the body is not valid gzip (Content-Encoding: gzip): {e}"
            ))
        })?;
    if out.len() > limit {
        return Err(too_large(
            format!("more than {limit} bytes after gzip decompression"),
            limit,
        ));
    }
    Ok(out)
}

/// Reads the body up to `limit` bytes, waiting at most `idle` for each next chunk; beyond the
/// limit, drains (a bounded amount) and answers 413.
///
/// # Errors
/// 413 over the limit, 408 when the body stalls for `idle`, 400 when it cannot be read.
async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
    idle: Duration,
) -> Result<Vec<u8>, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let mut body = body;
    let mut buf = Vec::with_capacity(declared.unwrap_or(0).min(limit));
    let mut seen = 0usize;
    let mut over = declared.is_some_and(|n| n > limit);
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(_) => {
                return Err(ApiError {
                    status: StatusCode::REQUEST_TIMEOUT,
                    message: format!(
                        "the request body stalled: no bytes for {} s after {seen} bytes \
                         (kiln serve --body-read-timeout-seconds)",
                        idle.as_secs_f64()
                    ),
                });
            }
        };
        let frame =
            frame.map_err(|e| ApiError::bad_request(format!("cannot read the body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            seen += data.len();
            if seen > limit {
                over = true;
            }
            if over {
                buf = Vec::new();
                if seen > limit + DRAIN_BYTES {
                    break;
                }
            } else {
                buf.extend_from_slice(&data);
            }
        }
    }
    if over {
        return Err(too_large(
            declared.map_or_else(
                || format!("at least {seen} bytes"),
                |n| format!("{n} bytes"),
            ),
            limit,
        ));
    }
    Ok(buf)
}

/// Decompresses (when gzip) and parses a predict body.
fn decode_and_parse(
    bytes: &[u8],
    encoding: Encoding,
    limit: usize,
    input: &str,
    shape: &[usize],
) -> Result<json::PredictRequest, ApiError> {
    match encoding {
        Encoding::Identity => json::parse_predict(bytes, input, shape),
        Encoding::Gzip => json::parse_predict(&gunzip(bytes, limit)?, input, shape),
    }
}

async fn predict(state: &AppState, target: &Target, request: Request) -> Outcome {
    let (version, servable) = state.registry.resolve(&target.model, &target.selector)?;
    let fail = |e: ApiError| (Some(version), e);
    let (parts, body) = request.into_parts();
    let encoding = content_encoding(&parts.headers).map_err(fail)?;
    let limit = state.max_body_bytes;
    let bytes = read_body(body, &parts.headers, limit, state.body_read_timeout)
        .await
        .map_err(fail)?;
    let input = servable.signature().signature_def[kiln::export::signature::DEFAULT_SIGNATURE]
        .inputs
        .keys()
        .next()
        .expect("a signature has one input")
        .clone();
    let shape = servable.input_shape().to_vec();
    let parsed = if bytes.len() > PARSE_INLINE_BYTES || encoding == Encoding::Gzip {
        let slot = state
            .parse_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| fail(ApiError::unavailable("the server is shutting down")))?;
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            decode_and_parse(&bytes, encoding, limit, &input, &shape)
        })
        .await
        .map_err(|e| fail(ApiError::internal(format!("parser thread failed: {e}"))))?
    } else {
        decode_and_parse(&bytes, encoding, limit, &input, &shape)
    }
    .map_err(fail)?;
    if let Some(sig) = &parsed.signature_name
        && sig != kiln::export::signature::DEFAULT_SIGNATURE
    {
        return Err(fail(ApiError::bad_request(format!(
            "Serving signature name: \"{sig}\" not found in signature def (kiln models have \
             \"serving_default\" only)"
        ))));
    }
    let n = parsed.shape[0];
    let rx = state
        .scheduler
        .submit(&target.model, servable.clone(), parsed.data, n)
        .map_err(|e| {
            fail(match e {
                SubmitError::QueueFull => ApiError {
                    status: StatusCode::TOO_MANY_REQUESTS,
                    message:
                        "The batch scheduling queue to which this task was submitted is full; \
                              retry later"
                            .into(),
                },
                SubmitError::ShuttingDown => ApiError::unavailable("the server is shutting down"),
            })
        })?;
    let outputs = rx
        .await
        .map_err(|_| fail(ApiError::internal("the inference thread went away")))?
        .map_err(|e| fail(ApiError::internal(format!("inference failed: {e}"))))?;
    let units: usize = servable.output_shape().iter().product();
    let body = json::predict_response(parsed.format, &outputs, units);
    Ok((
        ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Some(version),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_by_content() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[test]
    fn paths_parse_and_bad_names_are_400() {
        let t = parse_target("/v1/models/mnist:predict").unwrap();
        assert_eq!(
            (t.model.as_str(), &t.selector, t.op),
            ("mnist", &Selector::Latest, Op::Predict)
        );
        let t = parse_target("/v1/models/mnist/versions/12/metadata").unwrap();
        assert_eq!((&t.selector, t.op), (&Selector::Version(12), Op::Metadata));
        let t = parse_target("/v1/models/m.v-2_x/labels/stable:predict").unwrap();
        assert_eq!(t.selector, Selector::Label("stable".into()));
        assert_eq!(parse_target("/v1/models/m").unwrap().op, Op::Status);
        for bad in [
            "/v1/models/..:predict",
            "/v1/models/../etc:predict",
            "/v1/models/%2e%2e%2fetc/metadata",
            "/v1/models/a..b",
            "/v1/models/m/versions/01",
            "/v1/models/m/versions/-1:predict",
            "/v1/models/m/labels/..:predict",
            "/v1/models/m:classify",
            "/v1/models/:predict",
        ] {
            assert_eq!(parse_target(bad).unwrap_err().status, 400, "{bad}");
        }
        for unknown in [
            "/v1/models/m/other",
            "/v2/models/m",
            "/v1/models/m/versions/1/x/y",
        ] {
            assert_eq!(parse_target(unknown).unwrap_err().status, 404, "{unknown}");
        }
    }
}
