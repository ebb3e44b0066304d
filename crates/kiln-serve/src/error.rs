//! Errors: [`ServeError`] for starting the server, [`ApiError`] for HTTP responses.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Why the server could not start (or stopped).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A setting is invalid; `key` names the flag, file or parameter.
    #[error("{key}: {message}")]
    Config {
        /// The flag (`--model-name`), config key or file.
        key: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The address could not be bound (in use, not permitted).
    #[error("cannot listen on {addr}: {reason}; pick another --rest-api-port or --host")]
    Bind {
        /// `host:port`.
        addr: String,
        /// The OS error (in the message, not a separate cause).
        reason: std::io::Error,
    },
    /// Another I/O failure (the runtime, the signal handlers).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// kiln failed (device selection).
    #[error(transparent)]
    Kiln(#[from] kiln::KilnError),
}

impl ServeError {
    /// A config error for `key`.
    pub fn config(key: impl Into<String>, message: impl Into<String>) -> ServeError {
        ServeError::Config {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// An HTTP error with TF Serving's body: `{"error": "<message>"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// 400, 401, 404, 413, 429, 500 or 503.
    pub status: StatusCode,
    /// What went wrong, for the client.
    pub message: String,
}

impl ApiError {
    /// 400: malformed or invalid request.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// 404: unknown model, version or label.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    /// 503: the model exists but no version can serve.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
        }
    }

    /// 500: a bug or a failed forward pass.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message }).to_string();
        let mut response = (
            self.status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}
