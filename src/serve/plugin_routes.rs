//! Plugins' HTTP routes beside plughost's own endpoints (issue: the server
//! side of plugins): every [`RoutesEntry`] of the host is mounted on its
//! dialect's application when the server starts, each application's
//! lifespan runs once at start and once at stop, and a request no endpoint
//! of plughost's answers goes to the applications — under plughost's API
//! key unless its path is under a plugin's self-authenticating mount.

pub mod rate_limit;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::core::http_app::{AppRequest, HttpApp};
use crate::host::Host;

/// The mounted applications and what their plugins declared.
pub struct PluginRoutes {
    apps: Vec<Arc<dyn HttpApp>>,
    open_mounts: Vec<String>,
    /// The largest body a plugin declared it accepts.
    pub body_limit: Option<u64>,
    /// The limiter of the plugins' `rate_limit_key`s, if any declared one.
    pub rate_limit: Option<Arc<rate_limit::RateLimit>>,
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

impl PluginRoutes {
    /// Mount every plugin's routes; a plugin whose `routes` raises is
    /// reported and left out, the others are mounted. `None` when no
    /// plugin has routes.
    pub fn mount(host: &Host) -> Option<Arc<PluginRoutes>> {
        let registry = host.registry();
        let entries = registry.routes();
        if entries.is_empty() {
            return None;
        }
        let mut routes = PluginRoutes {
            apps: Vec::new(),
            open_mounts: Vec::new(),
            body_limit: None,
            rate_limit: None,
        };
        let mut rate_keys = Vec::new();
        for entry in entries {
            match entry.mount.mount() {
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
                Err(e) => tracing::warn!(
                    "the HTTP routes of '{}' are not mounted: {}{}",
                    entry.plugin,
                    e.message,
                    e.traceback
                        .as_deref()
                        .map(|t| format!("\n{t}"))
                        .unwrap_or_default()
                ),
            }
        }
        if !rate_keys.is_empty() {
            routes.rate_limit = Some(Arc::new(rate_limit::RateLimit::new(
                rate_limit::quota_from_env(),
                rate_keys,
            )));
        }
        Some(Arc::new(routes))
    }

    /// Run each application's lifespan startup; one that fails is reported
    /// and dropped (its routes answer 404), the server goes on.
    pub async fn startup(self: &Arc<Self>) -> Arc<Self> {
        let mut started = Vec::new();
        for app in &self.apps {
            match app.startup().await {
                Ok(()) => started.push(app.clone()),
                Err(e) => tracing::warn!(
                    "a plugin application's lifespan startup failed: {}; its routes are not served",
                    e.message
                ),
            }
        }
        Arc::new(PluginRoutes {
            apps: started,
            open_mounts: self.open_mounts.clone(),
            body_limit: self.body_limit,
            rate_limit: self.rate_limit.clone(),
        })
    }

    /// Run each application's lifespan shutdown.
    pub async fn shutdown(&self) {
        for app in &self.apps {
            if let Err(e) = app.shutdown().await {
                tracing::warn!(
                    "a plugin application's lifespan shutdown failed: {}",
                    e.message
                );
            }
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

    /// Forward `request` to the (first) application.
    pub async fn handle(self: Arc<Self>, request: Request, limit: usize) -> Response {
        let Some(app) = self.apps.first() else {
            return StatusCode::NOT_FOUND.into_response();
        };
        let (parts, body) = request.into_parts();
        let body = match axum::body::to_bytes(body, limit).await {
            Ok(b) => b,
            Err(e) => {
                return (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the request body was not read: {e} (the limit is {limit} bytes)"),
                )
                    .into_response()
            }
        };
        let headers = parts
            .headers
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
            .collect();
        let call = AppRequest {
            method: parts.method.as_str().to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            headers,
            body: body.to_vec(),
            client: None,
        };
        match app.call(call).await {
            Ok(answer) => response_of(answer),
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

/// A plugin application's answer as axum's response, its body streamed.
pub fn response_of(answer: crate::core::http_app::AppResponse) -> Response {
    let mut response = Response::new(Body::from_stream(chunks(answer.body)));
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
        client,
    }
}

/// The body channel as a stream; an `Err` ends the body early.
fn chunks(
    rx: tokio::sync::mpsc::UnboundedReceiver<Result<Vec<u8>, crate::core::outcome::PluginError>>,
) -> impl futures_util::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures_util::stream::unfold(rx, |mut rx| async move {
        let item = rx.recv().await?;
        Some((item.map_err(|e| std::io::Error::other(e.message)), rx))
    })
}
