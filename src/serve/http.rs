//! `plughost serve`: one axum server with MCP over streamable HTTP at
//! `/mcp`, the OpenAI-compatible chat endpoints, `/healthz` and `/metrics`.
//!
//! A key set (`--api-key` or `PLUGHOST_API_KEY`) is required as
//! `Authorization: Bearer KEY` on everything but `/healthz`; without one
//! the server only listens on loopback. Request bodies are bounded. On
//! SIGTERM or Ctrl-C it stops accepting, lets running turns finish for a
//! grace period, cancels those still running (their session hooks run),
//! closes MCP sessions, and finalizes the agent's sessions.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::mcp::PluginServer;
use super::metrics::Metrics;
use super::openai_api::{self, ChatState};
use crate::isolation::inherit::ClosedInForks;

/// How the server is set up.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The bearer key, if any.
    pub api_key: Option<String>,
    /// The largest request body accepted (bytes).
    pub max_body: usize,
    /// How long running turns may go on after a shutdown signal.
    pub shutdown_grace: Duration,
    // --- changed by rl7: re-mounted on reload ---
    /// Plugins' HTTP routes (answering what plughost's endpoints do not)
    /// and the auth mode `--auth` names, following reloads; `None` serves
    /// no plugin routes and plughost's API key.
    pub parts: Option<Arc<super::plugin_routes::live::ServerParts>>,
    /// Connections served at once; past it new ones wait in the kernel's
    /// accept queue (a slow-loris client cannot use up the descriptors).
    pub max_connections: usize,
    /// How long a client may take to send a request's headers (hyper's
    /// `header_read_timeout`; an idle keep-alive connection too).
    pub header_timeout: Duration,
    /// How long a request body may go without sending data (tower-http's
    /// `RequestBodyTimeout`).
    pub body_timeout: Duration,
    /// MCP HTTP sessions open at once; past it `initialize` gets 503.
    pub max_mcp_sessions: usize,
    /// An MCP HTTP session unused this long is closed (rmcp's `keep_alive`).
    pub mcp_session_idle: Duration,
}

/// Defaults of [`ServeOptions`]' limits (the `serve` flags' defaults).
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_MAX_MCP_SESSIONS: usize = 1000;
pub const DEFAULT_MCP_SESSION_IDLE: Duration = Duration::from_secs(300);

/// Where to listen: every address `host:port` resolves to must be loopback
/// unless a key is set.
pub async fn resolve_bind(
    host: &str,
    port: u16,
    api_key: Option<&str>,
) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve --host {host}: {e}"))?
        .collect();
    let Some(first) = addrs.first().copied() else {
        return Err(format!("--host {host} resolves to no address"));
    };
    if api_key.is_none() && addrs.iter().any(|a| !a.ip().is_loopback()) {
        return Err(format!(
            "refusing to listen on {host} ({}) without an API key: anyone who can reach it could call the plugins' tools and run the agent. Set one with --api-key KEY or PLUGHOST_API_KEY, or listen on loopback (--host 127.0.0.1)",
            first.ip()
        ));
    }
    Ok(first)
}

struct Shared {
    chat: Arc<ChatState>,
    metrics: Arc<Metrics>,
    api_key: Option<String>,
    parts: Option<Arc<super::plugin_routes::live::ServerParts>>,
    /// Requests on plugins' self-authenticating mounts in progress at once
    /// (see [`super::limits::anonymous_share`]).
    anonymous: Arc<tokio::sync::Semaphore>,
    anonymous_max: usize,
}

impl Shared {
    /// The mount in force (routes and auth), if the server has live parts.
    fn mounted(&self) -> Option<Arc<super::plugin_routes::live::Mounted>> {
        self.parts.as_ref().map(|p| p.load())
    }
}

/// `serve --auth MODE`: the plugin's authenticator judges the request, as
/// Felix's middleware has it judge; one that fails refuses (fail closed).
async fn plugin_auth(
    mode: &crate::core::http_app::AuthMode,
    request: Request,
    next: Next,
) -> Response {
    use crate::core::http_app::AuthAnswer;
    match mode
        .authenticator
        .authenticate(super::plugin_routes::head_of(&request))
        .await
    {
        Ok(AuthAnswer::Accepted { subject }) => {
            tracing::debug!("auth mode '{}' accepted '{subject}'", mode.mode);
            next.run(request).await
        }
        Ok(AuthAnswer::Refused(answer)) => super::plugin_routes::response_of(answer),
        Err(e) => {
            tracing::warn!(
                "the authenticator of auth mode '{}' ('{}') failed: {}{}",
                mode.mode,
                mode.plugin,
                e.message,
                e.traceback
                    .as_deref()
                    .map(|t| format!("\n{t}"))
                    .unwrap_or_default()
            );
            (
                StatusCode::UNAUTHORIZED,
                axum::Json(
                    serde_json::json!({"error": "unauthorized", "reason": "authenticator_error"}),
                ),
            )
                .into_response()
        }
    }
}

/// `--auth MODE` whose mode a reload took away: refused (fail closed).
fn auth_mode_gone(mode: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        axum::Json(serde_json::json!({
            "error": "unauthorized",
            "reason": "auth_mode_unavailable",
            "detail": format!("auth mode '{mode}' is no longer registered by a loaded plugin"),
        })),
    )
        .into_response()
}

/// Felix plugins' `rate_limit_key`s: outside authentication, as Felix's
/// middleware is, so failed credentials are throttled too.
async fn rate_limited(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    use super::plugin_routes::rate_limit::RateLimit;
    let Some(limit) = shared
        .mounted()
        .and_then(|m| m.routes.as_ref().and_then(|r| r.rate_limit.clone()))
    else {
        return next.run(request).await;
    };
    if RateLimit::exempt(request.uri().path()) {
        return next.run(request).await;
    }
    let bucket = limit.bucket(&super::plugin_routes::head_of(&request));
    match limit.check(bucket) {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

/// Compare without an early exit on the first differing byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn auth(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    use super::plugin_routes::live::Auth;
    let mounted = shared.mounted();
    if let Some(m) = &mounted {
        if m.routes
            .as_ref()
            .is_some_and(|r| r.open(request.uri().path()))
        {
            return super::limits::anonymous(
                &shared.anonymous,
                shared.anonymous_max,
                request,
                next,
            )
            .await;
        }
        match &m.auth {
            Auth::ApiKey => {}
            Auth::Plugin(mode) => return plugin_auth(mode, request, next).await,
            Auth::Gone { mode } => return auth_mode_gone(mode),
        }
    }
    let Some(key) = &shared.api_key else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(token) if same(token.trim().as_bytes(), key.as_bytes()) => next.run(request).await,
        other => {
            let message = if other.is_none() {
                "missing API key: send the header Authorization: Bearer KEY (the key plughost serve was started with)"
            } else {
                "wrong API key: send the key plughost serve was started with (--api-key or PLUGHOST_API_KEY) as Authorization: Bearer KEY"
            };
            let mut response = openai_api::error(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "invalid_api_key",
                message,
            );
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            response
        }
    }
}

/// The route label of a path, for metrics.
fn route_of(path: &str) -> &'static str {
    match path {
        "/v1/chat/completions" => "/v1/chat/completions",
        "/v1/models" => "/v1/models",
        "/healthz" => "/healthz",
        "/metrics" => "/metrics",
        "/admin/reload" => "/admin/reload",
        "/admin/plugins" => "/admin/plugins",
        p if p.starts_with("/admin/cron/") => "/admin/cron",
        p if p == "/mcp" || p.starts_with("/mcp/") => "/mcp",
        _ => "other",
    }
}

/// A `DELETE /mcp` that ended its session answers 200, as the official
/// MCP servers do (rmcp answers 202 Accepted, which both official clients
/// log as "Session termination failed: 202" for every session they end).
async fn session_ended_ok(request: Request, next: Next) -> Response {
    let delete = request.method() == axum::http::Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

async fn count(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let route = route_of(request.uri().path());
    let started = Instant::now();
    let response = next.run(request).await;
    shared
        .metrics
        .request(route, response.status().as_u16(), started.elapsed());
    response
}

async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    // The plugin set's fingerprint against the cluster's.
    let more = shared
        .chat
        .replicas
        .get()
        .map(|r| r.health())
        .unwrap_or_default();
    let platforms = crate::gateway::health_lines(&shared.chat.agent);
    (StatusCode::OK, format!("ok\n{more}{platforms}")).into_response()
}

async fn metrics_text(State(shared): State<Arc<Shared>>) -> Response {
    let mut text = shared.metrics.render(shared.chat.agent.host());
    if let Some(r) = shared.chat.replicas.get() {
        text.push_str(&r.metrics());
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

/// `POST /admin/reload`: discover and load the plugins again, swap them
/// in, and answer what changed ([`crate::host::ReloadReport`]). Calls
/// running meanwhile finish on the plugins they started on.
async fn admin_reload(State(shared): State<Arc<Shared>>) -> Response {
    match shared.chat.agent.host().reload_now().await {
        // With the server's re-mount (routes, auth mode, cron) done, so a
        // route answers from the new version once this returns.
        Ok(report) => {
            let mut body = serde_json::to_value(&report).unwrap_or_default();
            if let Some(parts) = &shared.parts {
                let server = parts
                    .mounted(report.generation, Duration::from_secs(30))
                    .await;
                body["server"] = serde_json::to_value(server).unwrap_or_default();
            }
            axum::Json(body).into_response()
        }
        Err(e) => openai_api::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "reload_failed",
            format!("the plugins were not reloaded (the old ones keep running): {e}"),
        ),
    }
}

/// `GET /admin/plugins`: each loaded plugin's version and when it loaded.
async fn admin_plugins(State(shared): State<Arc<Shared>>) -> Response {
    let host = shared.chat.agent.host();
    axum::Json(serde_json::json!({
        "generation": host.plugin_set().generation,
        "plugins": host.loaded_versions(),
    }))
    .into_response()
}

/// A request for the plugin routes of the mount in force; plughost's 404
/// when none serves. The body limit is the server's or the mount's
/// plugins' `body_limit_bytes`, the larger.
async fn plugin_route(
    parts: Arc<super::plugin_routes::live::ServerParts>,
    request: Request,
    limit: usize,
) -> Response {
    match parts.load().routes.clone().filter(|r| !r.is_empty()) {
        Some(routes) => {
            let limit = routes.body_limit.map_or(limit, |l| (l as usize).max(limit));
            routes.handle(request, limit).await
        }
        None => not_found().await,
    }
}

/// `POST /admin/cron/{name}`: run scheduled task `name` now, in this
/// server (`plughost cron run NAME` against a running server), so it never
/// runs twice at once with the server's own timer: a run already going
/// answers `already_running`.
async fn admin_cron(
    State(shared): State<Arc<Shared>>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    use crate::core::schedule::TaskRunOutcome;
    let registry = shared.chat.agent.host().registry();
    let Some(task) = registry.task(&name).cloned() else {
        let known: Vec<&str> = registry.tasks().iter().map(|t| t.name.as_str()).collect();
        return (
            StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({"name": name, "outcome": "unknown", "known": known})),
        )
            .into_response();
    };
    let outcome = task.run_scheduled(&registry).await;
    super::cron::report(&task, &outcome);
    let body = match outcome {
        TaskRunOutcome::Completed => serde_json::json!({"outcome": "completed"}),
        TaskRunOutcome::Failed(e) => serde_json::json!({
            "outcome": "failed", "error": e.message, "traceback": e.traceback,
        }),
        TaskRunOutcome::AlreadyRunning => serde_json::json!({"outcome": "already_running"}),
        TaskRunOutcome::Skipped(reason) => {
            serde_json::json!({"outcome": "skipped", "reason": reason})
        }
        TaskRunOutcome::Disabled => serde_json::json!({"outcome": "disabled"}),
    };
    let mut body = body;
    body["name"] = serde_json::json!(task.name);
    body["plugin"] = serde_json::json!(task.plugin);
    axum::Json(body).into_response()
}

async fn not_found() -> Response {
    openai_api::error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "not_found",
        "no such endpoint: plughost serve answers POST /v1/chat/completions, GET /v1/models, /mcp, GET /healthz and GET /metrics",
    )
}

/// The whole application. `mcp_cancel` ends every MCP session when
/// cancelled; `loopback` keeps rmcp's Host-header check (DNS rebinding
/// protection), which a server reachable by other names cannot keep.
pub fn router(
    chat: Arc<ChatState>,
    mcp: PluginServer,
    options: &ServeOptions,
    mcp_cancel: CancellationToken,
    loopback: bool,
) -> Router {
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = mcp_cancel;
    config.max_request_body_bytes = options.max_body;
    if !loopback {
        config = config.disable_allowed_hosts();
    }
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(options.mcp_session_idle);
    let sessions = Arc::new(sessions);
    let cap = SessionCap {
        sessions: sessions.clone(),
        max: options.max_mcp_sessions,
    };
    let mcp_service = StreamableHttpService::new(move || Ok(mcp.clone()), sessions, config);
    let shared = Arc::new(Shared {
        metrics: chat.metrics.clone(),
        chat: chat.clone(),
        api_key: options.api_key.clone(),
        parts: options.parts.clone(),
        anonymous: Arc::new(tokio::sync::Semaphore::new(super::limits::anonymous_share(
            options.max_connections,
        ))),
        anonymous_max: super::limits::anonymous_share(options.max_connections),
    });
    let chat_routes = Router::new()
        .route("/v1/chat/completions", post(openai_api::chat_completions))
        .route("/v1/models", get(openai_api::models))
        .with_state(chat);
    let fallback = match options.parts.clone() {
        Some(parts) => {
            let limit = options.max_body;
            Router::new()
                .fallback(move |request: Request| plugin_route(parts.clone(), request, limit))
        }
        None => Router::new().fallback(not_found),
    };
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .route("/admin/reload", post(admin_reload))
        .route("/admin/plugins", get(admin_plugins))
        .route("/admin/cron/{name}", post(admin_cron))
        .with_state(shared.clone())
        .merge(chat_routes)
        .nest_service(
            "/mcp",
            Router::new()
                .fallback_service(mcp_service)
                .layer(middleware::from_fn(session_ended_ok))
                .layer(middleware::from_fn_with_state(cap, cap_sessions)),
        )
        .merge(fallback)
        .layer(DefaultBodyLimit::max(options.max_body))
        .layer(middleware::from_fn_with_state(shared.clone(), auth))
        .layer(middleware::from_fn_with_state(shared.clone(), rate_limited))
        .layer(middleware::from_fn_with_state(shared, count))
}

/// A server must outlive its clients: the CLI restores SIGPIPE's default
/// action (so `plughost plugins list | head` ends quietly), and hyper
/// writes responses with `writev`, which, unlike the `send` of Rust's
/// sockets, raises SIGPIPE on a connection the client reset — which ended
/// the whole server when a client went away mid-request. Ignored, the
/// write fails with `EPIPE` and only that connection ends.
pub fn ignore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: sets the process-wide disposition of one signal to "ignore";
    // no handler is installed, so no code runs in signal context.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Serve `app` on `listener` until `signal` completes, evicting idle named
/// sessions meanwhile ([`super::idle`]), then shut down: no new
/// connections; running turns get `grace`, then `turns_cancel` cancels
/// them; MCP sessions close; the agent's sessions are finalized. The
/// listener's guard against forked children goes with it, dropped just
/// before it closes (its number is free for another file after that).
pub async fn serve_until(
    listener: (tokio::net::TcpListener, Option<ClosedInForks>),
    app: Router,
    chat: Arc<ChatState>,
    mcp_cancel: CancellationToken,
    (grace, limits): (Duration, &ServeOptions),
    signal: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stopping = CancellationToken::new();
    let stop = stopping.clone();
    let turns_cancel = chat.turns_cancel.clone();
    tokio::spawn(async move {
        signal.await;
        // Stop first, then say so: whatever becomes of the log (stderr a
        // closed pipe), the shutdown has begun.
        stop.cancel();
        // Long-lived MCP streams would hold the shutdown open.
        mcp_cancel.cancel();
        tracing::warn!(
            "shutting down: no new requests; running turns get {} s",
            grace.as_secs_f64()
        );
        tokio::time::sleep(grace).await;
        turns_cancel.cancel();
    });
    tokio::spawn(super::idle::sweep(
        chat.named.clone(),
        chat.agent.clone(),
        stopping.clone(),
    ));
    let graceful = stopping.clone();
    // Plugins' messaging platforms (docs/gateway.md), stopped with the server.
    let gateway = crate::gateway::Gateway::start(&chat.agent, chat.turns_cancel.clone());
    // Small request/response exchanges: TCP_NODELAY is set on each
    // connection (Nagle's algorithm and delayed ACKs add tens of ms).
    let served = serve_connections(listener, app, graceful, limits).await;
    if let Some(gateway) = gateway {
        gateway.stop(grace).await;
    }
    served?;
    // Connections are closed; turns spawned for them have ended or been
    // cancelled (a disconnected client cancels its turn).
    chat.turns_cancel.cancel();
    chat.agent.shutdown().await;
    // The sessions this replica kept leased between turns go to the
    // others at once.
    if let Some((cluster, _)) = chat.replicas.get().and_then(|r| r.shared.as_ref()) {
        cluster.free_kept().await;
    }
    Ok(())
}

/// SIGTERM or Ctrl-C. The handlers are installed when this is called, not
/// when the future is first polled: called before the listening address is
/// announced, a signal sent right after the announcement is never the
/// default action (which would kill the process without a shutdown).
/// Must be called inside the tokio runtime.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let watch = |kind: tokio::signal::unix::SignalKind, name: &'static str| {
        let stream = tokio::signal::unix::signal(kind);
        async move {
            match stream {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(e) => {
                    tracing::warn!("cannot watch {name}: {e}");
                    std::future::pending::<()>().await
                }
            }
        }
    };
    #[cfg(unix)]
    let (interrupt, term) = (
        watch(tokio::signal::unix::SignalKind::interrupt(), "SIGINT"),
        watch(tokio::signal::unix::SignalKind::terminate(), "SIGTERM"),
    );
    #[cfg(not(unix))]
    let (interrupt, term) = (
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
        std::future::pending::<()>(),
    );
    async move {
        tokio::select! {
            _ = interrupt => {},
            _ = term => {},
        }
    }
}

/// What [`cap_sessions`] needs: rmcp's session table and the cap.
#[derive(Clone)]
struct SessionCap {
    sessions: Arc<LocalSessionManager>,
    max: usize,
}

/// Refuse a new MCP session (a POST without `Mcp-Session-Id`: an
/// `initialize`) while [`ServeOptions::max_mcp_sessions`] are open, with a
/// JSON-RPC error and 503, so abandoned sessions cannot grow memory
/// without bound (they also close after `mcp_session_idle`).
async fn cap_sessions(State(cap): State<SessionCap>, request: Request, next: Next) -> Response {
    let opens = request.method() == axum::http::Method::POST
        && !request.headers().contains_key("mcp-session-id");
    if opens && cap.sessions.sessions.read().await.len() >= cap.max {
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32000, "message": format!(
                "too many MCP sessions open ({}); end one (DELETE /mcp) or wait for idle ones to close",
                cap.max
            )},
        });
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    }
    next.run(request).await
}

/// The accept loop: at most `max_connections` connections at once (one
/// semaphore permit each; past it the listener is not polled and clients
/// wait in the accept queue), each served by hyper with a header read
/// timeout and a request body timeout; on `stop`, no new connections and
/// the open ones finish their requests (hyper's graceful shutdown).
async fn serve_connections(
    (listener, forks): (tokio::net::TcpListener, Option<ClosedInForks>),
    app: Router,
    stop: CancellationToken,
    limits: &ServeOptions,
) -> std::io::Result<()> {
    use hyper_util::rt::TokioIo;
    ignore_sigpipe();
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    // The header time-out on a coarse tick: tokio's timer wheel would
    // wake its driving thread for about every other request head.
    http.timer(super::coarse_timer::CoarseTimer::spawn(
        super::coarse_timer::CoarseTimer::tick_for(limits.header_timeout),
    ))
    .header_read_timeout(limits.header_timeout);
    let service = tower_http::timeout::RequestBodyTimeout::new(app, limits.body_timeout);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            () = stop.cancelled() => break,
        };
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // EMFILE and the like: back off instead of spinning.
                    tracing::debug!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = stop.cancelled() => break,
        };
        if let Err(e) = tcp.0.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
        let (tcp, peer) = tcp;
        // the peer's address, for rate-limit buckets.
        let peered = tower_layer::Layer::layer(
            &axum::Extension(axum::extract::ConnectInfo(peer)),
            service.clone(),
        );
        let hyper_service = hyper_util::service::TowerToHyperService::new(peered);
        let connection = graceful.watch(http.serve_connection(TokioIo::new(tcp), hyper_service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection ended: {e}");
            }
            drop(permit);
        });
    }
    // The fork guard goes first: once the listener is closed its number
    // may name another file (a worker's sandbox ruleset).
    drop(forks);
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
