//! Plugins' HTTP routes beside plughost's own endpoints (issue: the server
//! side of plugins): every [`RoutesEntry`] of the plugin set is mounted on
//! fresh applications of its dialect (one round per mount), each
//! application's lifespan starts before it serves and shuts down after the
//! last request it served, and a request no endpoint of plughost's answers
//! goes to the applications — under plughost's authentication unless its
//! path is under a plugin's self-authenticating mount. [`live`] re-mounts
//! them (with the cron tasks and the auth mode) when the plugins reload.

pub mod live;
pub mod rate_limit;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::core::http_app::{AppRequest, BodyCut, BodyRest, HttpApp, RoutesEntry};
use crate::core::registry::Registry;

/// The mounted applications of one mount (one plugin set), and what their
/// plugins declared. Requests hold it while they run (their streamed
/// bodies too), so when a reload mounts a fresh one, the applications of
/// this one get their lifespan shutdown when its last request ends
/// ([`Drop`]).
pub struct PluginRoutes {
    apps: Vec<Arc<dyn HttpApp>>,
    open_mounts: Vec<String>,
    /// The largest body a plugin declared it accepts.
    pub body_limit: Option<u64>,
    /// The limiter of the plugins' `rate_limit_key`s, if any declared one.
    pub rate_limit: Option<Arc<rate_limit::RateLimit>>,
    /// Which entries this was mounted from (plugin and mount handle), to
    /// tell whether a new set's routes differ.
    from: Vec<(String, usize)>,
    /// Set once the lifespans started; cleared by an explicit shutdown.
    started: AtomicBool,
}

impl std::fmt::Debug for PluginRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRoutes")
            .field("apps", &self.apps.len())
            .field("open_mounts", &self.open_mounts)
            .field("body_limit", &self.body_limit)
            .field("rate_limit", &self.rate_limit.is_some())
            .finish()
    }
}

/// A mount handle's identity: the same entry in two sets (an unchanged
/// plugin) has the same handle.
fn identity(entries: &[RoutesEntry]) -> Vec<(String, usize)> {
    entries
        .iter()
        .map(|e| {
            (
                e.plugin.clone(),
                Arc::as_ptr(&e.mount) as *const () as usize,
            )
        })
        .collect()
}

/// Each mount gets its own round (dialects make one fresh application per
/// round: Felix a new FastAPI app); process-wide so two hosts never share one.
static ROUNDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl PluginRoutes {
    /// Mount every plugin's routes of `registry` on fresh applications; a
    /// plugin whose `routes` raises is reported (in `warnings` too) and
    /// left out, the others are mounted. `None` when no plugin has routes.
    pub fn mount(registry: &Registry, warnings: &mut Vec<String>) -> Option<PluginRoutes> {
        let entries = registry.routes();
        if entries.is_empty() {
            return None;
        }
        let round = ROUNDS.fetch_add(1, Ordering::Relaxed);
        let mut routes = PluginRoutes {
            apps: Vec::new(),
            open_mounts: Vec::new(),
            body_limit: None,
            rate_limit: None,
            from: identity(entries),
            started: AtomicBool::new(false),
        };
        let mut rate_keys = Vec::new();
        for entry in entries {
            match entry.mount.mount_in(round) {
                Ok(app) => {
                    tracing::info!("mounted the HTTP routes of '{}'", entry.plugin);
                    if !routes.apps.iter().any(|a| a.same_as(app.as_ref())) {
                        routes.apps.push(app);
                    }
                    routes
                        .open_mounts
                        .extend(entry.self_authenticating.iter().cloned());
                    routes.body_limit = routes.body_limit.max(entry.body_limit);
                    if let Some(key) = &entry.rate_limit_key {
                        rate_keys.push((entry.plugin.clone(), key.clone()));
                    }
                }
                Err(e) => {
                    let line = format!(
                        "the HTTP routes of '{}' are not mounted: {}",
                        entry.plugin, e.message
                    );
                    tracing::warn!(
                        "{line}{}",
                        e.traceback
                            .as_deref()
                            .map(|t| format!("\n{t}"))
                            .unwrap_or_default()
                    );
                    warnings.push(line);
                }
            }
        }
        if !rate_keys.is_empty() {
            routes.rate_limit = Some(Arc::new(rate_limit::RateLimit::new(
                rate_limit::quota_from_env(),
                rate_keys,
            )));
        }
        Some(routes)
    }

    /// Whether this was mounted from the same routes entries as `registry`
    /// has (no plugin with routes changed), so it can go on serving.
    pub fn mounted_from(&self, registry: &Registry) -> bool {
        self.from == identity(registry.routes())
    }

    /// Run each application's lifespan startup; one that fails is reported
    /// (in `warnings` too) and dropped (its routes answer 404).
    pub async fn startup(mut self, warnings: &mut Vec<String>) -> Self {
        let mut started = Vec::new();
        for app in std::mem::take(&mut self.apps) {
            match app.startup().await {
                Ok(()) => started.push(app),
                Err(e) => {
                    let line = format!(
                        "a plugin application's lifespan startup failed: {}; its routes are not served",
                        e.message
                    );
                    tracing::warn!("{line}");
                    warnings.push(line);
                }
            }
        }
        self.apps = started;
        self.started.store(true, Ordering::Release);
        self
    }

    /// Run each application's lifespan shutdown (once: a later drop does
    /// not run it again).
    pub async fn shutdown(&self) {
        if self.started.swap(false, Ordering::AcqRel) {
            shut_down(self.apps.clone()).await;
        }
    }

    /// Whether `path` is under a self-authenticating mount.
    pub fn open(&self, path: &str) -> bool {
        self.open_mounts.iter().any(|m| {
            let m = m.trim_end_matches('/');
            !m.is_empty() && (path == m || path.starts_with(&format!("{m}/")))
        })
    }

    /// Whether any application is being served.
    pub fn is_empty(&self) -> bool {
        self.apps.is_empty()
    }

    /// Forward `request` to the applications (`answer_of`). Its body goes on
    /// streaming to the application after the call starts (a large upload
    /// is never held whole); past `limit` bytes it is cut and the answer is
    /// 413, as a declared `Content-Length` over `limit` is before the call.
    pub async fn handle(self: Arc<Self>, request: Request, limit: usize) -> Response {
        if self.apps.is_empty() {
            return StatusCode::NOT_FOUND.into_response();
        }
        let (parts, body) = request.into_parts();
        let declared = parts
            .headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            tokio::spawn(discard(body.into_data_stream()));
            return too_large(limit);
        }
        let over = Arc::new(AtomicBool::new(false));
        let (body, rest) = match request_body(body, limit, over.clone()).await {
            Ok(split) => split,
            Err(BodyCut::TooLarge) => return too_large(limit),
            Err(BodyCut::Disconnected(e)) => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("the request body was not read: {e}"),
                )
                    .into_response()
            }
        };
        let headers = parts
            .headers
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
            .collect();
        let client = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0);
        let call = AppRequest {
            method: parts.method.as_str().to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            headers,
            body,
            rest,
            client,
        };
        let answered = answer_of(&self.apps, call).await;
        if over.load(Ordering::Acquire) {
            // The application was cut off mid-body (it saw `http.disconnect`):
            // whatever it answered, the answer is the limit's.
            return too_large(limit);
        }
        match answered {
            // The body holds this mount until it ends: a reload's lifespan
            // shutdown of these applications waits for it.
            Ok(answer) => response_held(answer, Some(self.clone())),
            Err(e) => {
                tracing::warn!(
                    "a plugin route failed on {}: {}{}",
                    parts.uri.path(),
                    e.message,
                    e.traceback
                        .as_deref()
                        .map(|t| format!("\n{t}"))
                        .unwrap_or_default()
                );
                (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error").into_response()
            }
        }
    }
}

/// The answer of the first application that knows the request's path:
/// applications are asked in turn while they answer 404 (an isolated
/// plugin's routes are an application of their own, in its worker; an
/// in-process dialect's plugins share one). A body still streaming can
/// be sent once only: that request goes to the first application alone.
async fn answer_of(
    apps: &[Arc<dyn HttpApp>],
    call: AppRequest,
) -> Result<crate::core::http_app::AppResponse, crate::core::outcome::PluginError> {
    let Some((last, before)) = apps.split_last() else {
        return Err(crate::core::outcome::PluginError::native("no application"));
    };
    if call.rest.is_some() {
        return apps[0].call(call).await;
    }
    for app in before {
        let again = AppRequest {
            method: call.method.clone(),
            path: call.path.clone(),
            query: call.query.clone(),
            headers: call.headers.clone(),
            body: call.body.clone(),
            rest: None,
            client: call.client,
        };
        let answer = app.call(again).await?;
        if answer.status != StatusCode::NOT_FOUND.as_u16() {
            return Ok(answer);
        }
    }
    last.call(call).await
}

/// At most this much of a refused body is read and thrown away.
const DISCARD_AT_MOST: usize = 16 << 20;

/// Read and throw away the rest of a refused body (up to
/// [`DISCARD_AT_MOST`]; the server's body timeout bounds the time), so a
/// client still sending it gets to read the 413 instead of a broken pipe,
/// as nginx's lingering close does; past that the connection just closes.
async fn discard(mut data: axum::body::BodyDataStream) {
    use futures_util::StreamExt;
    let mut thrown = 0;
    while let Some(Ok(chunk)) = data.next().await {
        thrown += chunk.len();
        if thrown > DISCARD_AT_MOST {
            break;
        }
    }
}

/// The 413 answer of a body over `limit`.
fn too_large(limit: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is over the limit of {limit} bytes"),
    )
        .into_response()
}

/// The body as far as it has arrived with its first frame, and the rest as
/// a stream when there is more: a body that is all there (every GET, most
/// small POSTs) is handed over whole, with no stream and no task. The
/// stream counts bytes against `limit` and sets `over` before it ends with
/// [`BodyCut::TooLarge`].
async fn request_body(
    body: Body,
    limit: usize,
    over: Arc<AtomicBool>,
) -> Result<(Vec<u8>, Option<BodyRest>), BodyCut> {
    use axum::body::HttpBody;
    use futures_util::StreamExt;
    let mut data = body.into_data_stream();
    if data.is_end_stream() {
        return Ok((Vec::new(), None));
    }
    let first = match data.next().await {
        None => return Ok((Vec::new(), None)),
        Some(Ok(chunk)) => chunk.to_vec(),
        Some(Err(e)) => return Err(BodyCut::Disconnected(e.to_string())),
    };
    if first.len() > limit {
        tokio::spawn(discard(data));
        return Err(BodyCut::TooLarge);
    }
    if data.is_end_stream() {
        return Ok((first, None));
    }
    let seen = first.len();
    let rest = futures_util::stream::unfold(Some((data, seen)), move |state| {
        let over = over.clone();
        async move {
            let (mut data, seen) = state?;
            match data.next().await? {
                Ok(chunk) => {
                    let seen = seen + chunk.len();
                    if seen > limit {
                        over.store(true, Ordering::Release);
                        tokio::spawn(discard(data));
                        Some((Err(BodyCut::TooLarge), None))
                    } else {
                        Some((Ok(chunk.to_vec()), Some((data, seen))))
                    }
                }
                Err(e) => Some((Err(BodyCut::Disconnected(e.to_string())), None)),
            }
        }
    });
    Ok((first, Some(BodyRest(rest.boxed()))))
}

impl Drop for PluginRoutes {
    /// The last request of a mount a reload replaced has ended: its
    /// applications' lifespan shutdown runs now (on the server's runtime).
    fn drop(&mut self) {
        if !self.started.swap(false, Ordering::AcqRel) || self.apps.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(shut_down(std::mem::take(&mut self.apps)));
            }
            Err(_) => tracing::warn!(
                "plugin applications replaced outside the server's runtime: their lifespan shutdown does not run"
            ),
        }
    }
}

async fn shut_down(apps: Vec<Arc<dyn HttpApp>>) {
    for app in apps {
        if let Err(e) = app.shutdown().await {
            tracing::warn!(
                "a plugin application's lifespan shutdown failed: {}",
                e.message
            );
        }
    }
}

/// A plugin application's answer as axum's response, its body streamed.
pub fn response_of(answer: crate::core::http_app::AppResponse) -> Response {
    response_held(answer, None)
}

/// [`response_of`], the body stream holding `mount` until it ends.
fn response_held(
    answer: crate::core::http_app::AppResponse,
    mount: Option<Arc<PluginRoutes>>,
) -> Response {
    let mut response = Response::new(Body::from_stream(chunks(answer.body, mount)));
    *response.status_mut() =
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in answer.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(&name),
            HeaderValue::from_bytes(&value),
        ) {
            response.headers_mut().append(n, v);
        }
    }
    response
}

/// `request`'s method, path, query, headers and client address for an
/// authenticator or a rate-limit key (the body stays with the request).
pub fn head_of(request: &Request) -> AppRequest {
    let client = request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0);
    AppRequest {
        method: request.method().as_str().to_string(),
        path: request.uri().path().to_string(),
        query: request.uri().query().unwrap_or_default().to_string(),
        headers: request
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
            .collect(),
        body: Vec::new(),
        rest: None,
        client,
    }
}

/// The body channel as a stream; an `Err` ends the body early.
fn chunks(
    rx: tokio::sync::mpsc::Receiver<Result<Vec<u8>, crate::core::outcome::PluginError>>,
    mount: Option<Arc<PluginRoutes>>,
) -> impl futures_util::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures_util::stream::unfold((rx, mount), |(mut rx, mount)| async move {
        let item = rx.recv().await?;
        Some((
            item.map_err(|e| std::io::Error::other(e.message)),
            (rx, mount),
        ))
    })
}
