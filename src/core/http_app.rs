//! HTTP routes plugins contribute (Felix's `plugin.routes(app, tools=…)`),
//! as the serving host sees them: an application it forwards requests to
//! ([`HttpApp`]) and, per plugin, how its routes are added to one
//! ([`RoutesEntry`]).
//!
//! Plain Rust, no Python: the dialect's application is an ASGI app behind
//! `crate::runtime::asgi`; the server (`crate::serve::plugin_routes`)
//! mounts the entries, starts and stops each application once, and sends
//! it every request plughost's own endpoints do not answer.

use std::sync::Arc;

use tokio::sync::mpsc::Receiver;

use super::hooks::BoxFuture;
use super::outcome::PluginError;

/// One request for a plugin application: its head, the body that had
/// arrived when it was handed over, and the rest of the body still coming.
#[derive(Debug, Default)]
pub struct AppRequest {
    pub method: String,
    pub path: String,
    /// The query string, without its `?`.
    pub query: String,
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, or its first part when `rest` is `Some`.
    pub body: Vec<u8>,
    /// The rest of a body that had not all arrived (a large or chunked
    /// upload), streamed to the application as it comes; `None` when `body`
    /// is the whole of it.
    pub rest: Option<BodyRest>,
    pub client: Option<std::net::SocketAddr>,
}

/// Why a streamed request body ended before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyCut {
    /// The body passed the server's limit; the server answers 413.
    TooLarge,
    /// The client went away or the connection failed.
    Disconnected(String),
}

/// The rest of a request body: chunks in order, then the end of the stream;
/// an `Err` ends it early (the application sees `http.disconnect`).
pub struct BodyRest(pub futures_util::stream::BoxStream<'static, Result<Vec<u8>, BodyCut>>);

impl std::fmt::Debug for BodyRest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BodyRest(..)")
    }
}

/// The start of a plugin application's answer, and the rest as it comes.
/// Dropping `body` (a client that went away) cancels the application's
/// handling of the request.
pub struct AppResponse {
    pub status: u16,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// Body chunks in order; closed at the end of the answer. An `Err`
    /// ends the body early (the application failed after it started).
    /// Bounded: a client that stops reading stalls the application.
    pub body: Receiver<Result<Vec<u8>, PluginError>>,
}

/// An application requests are forwarded to.
pub trait HttpApp: Send + Sync + 'static {
    /// Its lifespan's startup (ASGI `lifespan.startup`), once, before the
    /// first request; an application without a lifespan starts at once.
    fn startup(&self) -> BoxFuture<Result<(), PluginError>>;
    /// Its lifespan's shutdown, once, when the server stops.
    fn shutdown(&self) -> BoxFuture<Result<(), PluginError>>;
    /// Answer one request; `Err` when it failed before its answer started.
    fn call(&self, request: AppRequest) -> BoxFuture<Result<AppResponse, PluginError>>;
    /// Whether `other` is the same application (plugins of one dialect
    /// share one, as Felix's share its FastAPI app).
    fn same_as(&self, other: &dyn HttpApp) -> bool;
    fn as_any(&self) -> &dyn std::any::Any;
}

/// Adds one plugin's routes to its dialect's application.
pub trait MountRoutes: Send + Sync + 'static {
    /// Add the routes (Felix's `plugin.routes(app, tools=…)`) and hand back
    /// the application that now serves them.
    fn mount(&self) -> Result<Arc<dyn HttpApp>, PluginError>;
    /// [`mount`](Self::mount) on the application of mount `round`: every
    /// plugin mounted in one round shares a fresh application, so a reload
    /// re-mounts on a new one while requests in flight finish on the old.
    fn mount_in(&self, round: u64) -> Result<Arc<dyn HttpApp>, PluginError> {
        let _ = round;
        self.mount()
    }
}

/// One plugin's routes and the server settings it declares.
#[derive(Clone)]
pub struct RoutesEntry {
    pub plugin: String,
    pub mount: Arc<dyn MountRoutes>,
    /// Path prefixes that carry their own authentication: plughost's API
    /// key is not asked for under them (Felix's `self_authenticating_mounts`).
    pub self_authenticating: Vec<String>,
    /// The largest request body the plugin accepts; the server's limit is
    /// the largest of its own and every plugin's (Felix's `body_limit_bytes`).
    pub body_limit: Option<u64>,
    /// The plugin's rate-limit key (Felix's `rate_limit_key(request)`): the
    /// bucket a request counts against; `None` lets the next plugin's (and at
    /// last the client's address) decide.
    pub rate_limit_key: Option<Arc<dyn RateLimitKey>>,
}

/// Names the rate-limit bucket of a request (Felix's
/// `RateLimitKeyResolver`), so a plugin can limit per tenant or per token
/// rather than per address.
pub trait RateLimitKey: Send + Sync + 'static {
    /// The bucket of `request` (method, path, headers; no body), or `None`.
    fn key(&self, request: &AppRequest) -> Result<Option<String>, PluginError>;
}

impl std::fmt::Debug for RoutesEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutesEntry")
            .field("plugin", &self.plugin)
            .field("self_authenticating", &self.self_authenticating)
            .field("body_limit", &self.body_limit)
            .field("rate_limit_key", &self.rate_limit_key.is_some())
            .finish()
    }
}

/// What an authenticator says of a request.
pub enum AuthAnswer {
    /// The caller is who `subject` says.
    Accepted { subject: String },
    /// The caller is refused with this answer (a 401 the plugin built).
    Refused(AppResponse),
}

/// A plugin's authentication mode (Felix's `register_authenticator(mode,
/// builder)`), selected with `plughost serve --auth MODE`.
pub trait Authenticator: Send + Sync + 'static {
    /// Judge one request (its method, path and headers; the body is not read).
    fn authenticate(&self, request: AppRequest) -> BoxFuture<Result<AuthAnswer, PluginError>>;
}

/// One registered authentication mode.
#[derive(Clone)]
pub struct AuthMode {
    pub mode: String,
    pub plugin: String,
    pub authenticator: Arc<dyn Authenticator>,
}

impl std::fmt::Debug for AuthMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthMode")
            .field("mode", &self.mode)
            .field("plugin", &self.plugin)
            .finish()
    }
}
