//! Errors as OpenAI error objects: `{"error": {"message", "type", "param", "code"}}` with
//! the HTTP status the `openai` client maps to its exception classes.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error answered to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// The response's HTTP status.
    pub status: StatusCode,
    /// What went wrong, for a person to read.
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, ...
    pub kind: &'static str,
    /// The request field at fault, when one is (`null` in the body otherwise).
    pub param: Option<std::borrow::Cow<'static, str>>,
    /// OpenAI's machine-readable `code` (`context_length_exceeded`, `server_busy`, ...), or
    /// `null`.
    pub code: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
        }
    }

    /// 400: the request cannot be served as written.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            message.into(),
        )
    }

    /// The same error about `to` where it was about `from` (the completions endpoint's
    /// `prompt` is the chat endpoint's `messages`).
    pub fn for_param(mut self, from: &'static str, to: &'static str) -> ApiError {
        if self.param.as_deref() == Some(from) {
            self.param = Some(to.into());
        }
        self
    }

    /// The same error about the request field `name` (a name the request chose).
    pub fn with_param_name(mut self, name: String) -> ApiError {
        self.param = Some(name.into());
        self
    }

    /// 400 about one parameter.
    pub fn invalid_param(param: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.into()),
            ..ApiError::invalid(message)
        }
    }

    /// 401 `invalid_api_key`: the bearer key is missing or wrong.
    pub fn unauthorized() -> ApiError {
        ApiError {
            code: Some("invalid_api_key"),
            ..ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "invalid API key: send `Authorization: Bearer <key>` with the server's --api-key",
            )
        }
    }

    /// 404: no such route, or a model this server does not serve.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
    }

    /// 429: the queue is full.
    pub fn busy(queue: usize) -> ApiError {
        ApiError {
            code: Some("server_busy"),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                format!(
                    "the server is busy: every generation slot is taken and {queue} requests are queued (--max-concurrent, --queue)"
                ),
            )
        }
    }

    /// 503: the model is not loaded (yet), or the server is stopping.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
    }

    /// 504: the request ran past its time limit.
    pub fn timeout(seconds: u64) -> ApiError {
        ApiError {
            code: Some("timeout"),
            ..ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "server_error",
                format!("the request ran past its time limit of {seconds} s (--request-timeout)"),
            )
        }
    }

    /// 500: the server or the model failed, not the request.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The error object's JSON.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}
