//! The bounds `plughost serve` keeps whatever its clients do, beside
//! those of [`super::http`]'s accept loop (connections, header and body
//! time-outs): the share of the connection slots anonymous requests may
//! hold, and the process's descriptor limit.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// How many of `max_connections` requests on plugins' self-authenticating
/// mounts (which anyone can reach, as plughost checks no key there) may
/// hold at once: half, so clients nobody authenticated — 560 connections
/// trickling bodies to a webhook — can never take the slots that
/// `/healthz`, the chat and MCP endpoints are served in. Past it such a
/// request gets 503 at once and its connection closes, freeing its slot.
pub fn anonymous_share(max_connections: usize) -> usize {
    (max_connections / 2).max(1)
}

/// A request under a self-authenticating mount, within the
/// [`anonymous_share`] of the server's connections: its slot is held until
/// its answer's body has been sent; past the share, 503 and the
/// connection closes.
pub(super) async fn anonymous(
    slots: &Arc<tokio::sync::Semaphore>,
    max: usize,
    request: Request,
    next: Next,
) -> Response {
    let Ok(permit) = slots.clone().try_acquire_owned() else {
        let mut response = (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "too many requests in progress on unauthenticated routes ({}); try again later",
                max
            ),
        )
            .into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    };
    let (parts, body) = next.run(request).await.into_parts();
    let held = futures_util::StreamExt::map(body.into_data_stream(), move |chunk| {
        let _held = &permit;
        chunk
    });
    Response::from_parts(parts, axum::body::Body::from_stream(held))
}

/// Raise the soft limit of open descriptors to the hard one: a server's
/// connections, sessions and workers each take some, and the usual soft
/// 1,024 is a fraction of what the system allows (what nginx's
/// `worker_rlimit_nofile` and systemd's services do). Returns the limits
/// before and after, `None` when they cannot be read or set.
pub fn raise_descriptor_limit() -> Option<(libc::rlim_t, libc::rlim_t)> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit on this process, with a pointer
        // to a local struct that outlives both calls; results are checked.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return None;
            }
            let before = limit.rlim_cur;
            if limit.rlim_cur < limit.rlim_max {
                limit.rlim_cur = limit.rlim_max;
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return None;
                }
            }
            Some((before, limit.rlim_cur))
        }
    }
    #[cfg(not(unix))]
    None
}
