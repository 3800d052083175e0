//! `tools/call` with an idempotency key in its request metadata
//! (`"_meta": {"idempotencyKey": "…"}`), on a replica of a cluster: the
//! first call's result is stored and given again to a retry with the same
//! key, tool and arguments on any replica, within the window of
//! [`crate::cluster::DEFAULT_IDEMPOTENCY_WINDOW`]. A retry while the first
//! runs gets an error saying so; the key with another tool or arguments is
//! refused. A result that is an error is stored too: it is what the call did.

use std::future::Future;

use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorData};

use crate::cluster::idempotency::{request_hash, Claim};
use crate::cluster::Cluster;

/// The `_meta` field naming the key.
pub const META_KEY: &str = "idempotencyKey";

/// What a key is bound to: the hash of the call's tool and arguments,
/// written from the request where it stands (the text is what
/// `{"name": …, "arguments": …}` always was, so stored hashes still match).
pub fn request_key(request: &CallToolRequestParams) -> String {
    #[derive(serde::Serialize)]
    struct What<'a> {
        name: &'a str,
        arguments: &'a Option<serde_json::Map<String, serde_json::Value>>,
    }
    let what = serde_json::to_vec(&What {
        name: request.name.as_ref(),
        arguments: &request.arguments,
    })
    .expect("a request serialises");
    request_hash("mcp tools/call", &what)
}

/// Run `call` once for `key` across the cluster; `hash` is the call's
/// [`request_key`] (taken first, so the call can own the arguments).
pub async fn call<F, Fut>(
    cluster: &Cluster,
    key: &str,
    hash: String,
    call: F,
) -> Result<CallToolResult, ErrorData>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = CallToolResult>,
{
    let claim = cluster
        .idempotency_claim(&format!("mcp:{key}"), &hash)
        .await
        .map_err(|e| {
            ErrorData::internal_error(
                format!("the idempotency store cannot be reached: {e}"),
                None,
            )
        })?;
    match claim {
        Claim::Run(running) => {
            let result = call().await;
            let body = serde_json::to_string(&result).expect("a tool result serialises");
            if let Err(e) = running.finish(200, body).await {
                tracing::warn!("cannot store the result of idempotency key '{key}': {e}");
            }
            Ok(result)
        }
        Claim::Replay { body, .. } => serde_json::from_str(&body)
            .map_err(|e| ErrorData::internal_error(format!("a stored result is unreadable: {e}"), None)),
        Claim::InProgress => Err(ErrorData::invalid_request(
            format!("a tools/call with idempotency key '{key}' is still running; retry later for its result"),
            None,
        )),
        Claim::Mismatch => Err(ErrorData::invalid_params(
            format!("idempotency key '{key}' was used for another tool or other arguments"),
            None,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key stored by an earlier plughost still matches its retry: the
    /// hashed text is the one the `json!` value wrote.
    #[test]
    fn the_request_key_hashes_the_text_it_always_did() {
        for arguments in [
            None,
            Some(serde_json::Map::new()),
            serde_json::json!({"z": 1, "a": [1.5, "é\"", null], "m": {"k": true}})
                .as_object()
                .cloned(),
        ] {
            let mut request = CallToolRequestParams::new("echo");
            request.arguments = arguments;
            let what = serde_json::json!({"name": request.name, "arguments": request.arguments});
            let before = request_hash("mcp tools/call", what.to_string().as_bytes());
            assert_eq!(request_key(&request), before);
        }
    }
}
