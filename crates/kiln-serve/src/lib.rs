//! # kiln-serve
//!
//! A server for models exported by `kiln export` that speaks TF Serving's REST API v1, so
//! existing TF Serving clients work unchanged: version status, signature metadata and
//! `:predict` in the row (`instances`) and columnar (`inputs`) formats, with TF Serving's error
//! bodies (`{"error": "..."}`) and status codes.
//!
//! - [`config`]: models, version policies and labels, batching parameters, limits.
//! - [`models`]: numbered version directories, polled; load before unload (hot reload).
//! - [`scheduler`]: inference on worker threads, request batching.
//! - [`json`]: request parsing and responses.
//! - [`http`]: the endpoints (axum), bearer-token auth, body limit.
//! - [`metrics`]: Prometheus metrics.
//! - [`server`]: start, stop, graceful shutdown on SIGTERM.
//!
//! ```no_run
//! use kiln_serve::{ModelConfig, ServeConfig, Server};
//! let server = Server::start(ServeConfig {
//!     port: 0,
//!     models: vec![ModelConfig::new("fashion-mnist-cnn", "runs/fashion-mnist-cnn/export/fashion-mnist-cnn")],
//!     ..Default::default()
//! })?;
//! println!("listening on {}", server.addr());
//! server.stop()?;
//! # Ok::<(), kiln_serve::ServeError>(())
//! ```

#![warn(missing_docs)]

pub mod config;
pub mod error;
pub mod http;
pub mod json;
pub mod metrics;
pub mod models;
pub mod scheduler;
pub mod server;

pub use config::{BatchingConfig, ModelConfig, ServeConfig, VersionPolicy};
pub use error::{ApiError, ServeError};
pub use server::{Server, serve_until_signal};
