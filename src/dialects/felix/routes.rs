//! Felix's `plugin.routes(app, tools=…)`: mounted by `plughost serve` on
//! one FastAPI app shared by every Felix plugin of a mount round
//! (`_plughost_felix.plugin_app(round)`; a reload mounts on a fresh one),
//! which the server runs as an ASGI application ([`crate::runtime::asgi`]).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyModule;

use crate::core::http_app::{AppRequest, HttpApp, MountRoutes, RateLimitKey, RoutesEntry};
use crate::core::outcome::PluginError;
use crate::runtime::{asgi, plugin_error, try_attach};

struct FelixRoutes {
    plugin: Py<PyAny>,
    felix: Py<PyModule>,
}

impl MountRoutes for FelixRoutes {
    fn mount(&self) -> Result<Arc<dyn HttpApp>, PluginError> {
        self.mount_in(0)
    }

    /// `_plughost_felix.mount_routes(plugin, round)`: the plugin's routes
    /// on round `round`'s FastAPI app (a fresh one per round).
    fn mount_in(&self, round: u64) -> Result<Arc<dyn HttpApp>, PluginError> {
        try_attach(|py| {
            self.felix
                .bind(py)
                .getattr("mount_routes")
                .and_then(|f| f.call1((self.plugin.bind(py), round)))
                .and_then(|app| asgi::app(py, app.unbind()))
                .map_err(|e| plugin_error(py, &e))
        })
        .unwrap_or_else(|e| Err(PluginError::native(e.to_string())))
    }
}

/// Felix's `plugin.rate_limit_key(request)`, called with a Starlette
/// `Request` (`_plughost_felix.rate_limit_key`).
struct FelixRateKey {
    resolver: Py<PyAny>,
    felix: Py<PyModule>,
}

impl RateLimitKey for FelixRateKey {
    fn key(&self, request: &AppRequest) -> Result<Option<String>, PluginError> {
        try_attach(|py| {
            let scope = asgi::scope_of(py, request)?;
            self.felix
                .bind(py)
                .getattr("rate_limit_key")?
                .call1((self.resolver.bind(py), scope))?
                .extract::<Option<String>>()
        })
        .map_err(|e| PluginError::native(e.to_string()))?
        .map_err(|e| {
            try_attach(|py| plugin_error(py, &e))
                .unwrap_or_else(|e| PluginError::native(e.to_string()))
        })
    }
}

/// What a plugin object declares beside its `routes`.
pub(super) struct Declared {
    pub mounts: Vec<String>,
    pub limit: Option<u64>,
    pub rate_key: Option<Py<PyAny>>,
}

/// The routes entry of one `(plugin, self_authenticating_mounts,
/// body_limit_bytes, rate_limit_key)` that `_plughost_felix.load` returned.
pub(super) fn entry(
    py: Python<'_>,
    key: &str,
    plugin: Py<PyAny>,
    declared: Declared,
    felix: Py<PyModule>,
) -> RoutesEntry {
    let rate_limit_key = declared.rate_key.map(|resolver| {
        let felix = felix.clone_ref(py);
        Arc::new(FelixRateKey { resolver, felix }) as Arc<dyn RateLimitKey>
    });
    RoutesEntry {
        plugin: key.to_string(),
        mount: Arc::new(FelixRoutes { plugin, felix }),
        self_authenticating: declared.mounts,
        body_limit: declared.limit,
        rate_limit_key,
    }
}
