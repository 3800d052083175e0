//! Felix's `plugin.routes(app, tools=…)`: mounted by `plughost serve` on
//! one FastAPI app shared by every Felix plugin (`_plughost_felix.plugin_app`),
//! which the server runs as an ASGI application ([`crate::runtime::asgi`]).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyModule;

use crate::core::http_app::{HttpApp, MountRoutes, RoutesEntry};
use crate::core::outcome::PluginError;
use crate::runtime::{asgi, plugin_error, try_attach};

struct FelixRoutes {
    plugin: Py<PyAny>,
    felix: Py<PyModule>,
}

impl MountRoutes for FelixRoutes {
    fn mount(&self) -> Result<Arc<dyn HttpApp>, PluginError> {
        try_attach(|py| {
            self.felix
                .bind(py)
                .getattr("mount_routes")
                .and_then(|f| f.call1((self.plugin.bind(py),)))
                .and_then(|app| asgi::app(py, app.unbind()))
                .map_err(|e| plugin_error(py, &e))
        })
        .unwrap_or_else(|e| Err(PluginError::native(e.to_string())))
    }
}

/// The routes entry of one `(plugin, self_authenticating_mounts,
/// body_limit_bytes)` that `_plughost_felix.load` returned.
pub(super) fn entry(
    key: &str,
    plugin: Py<PyAny>,
    self_authenticating: Vec<String>,
    body_limit: Option<u64>,
    felix: Py<PyModule>,
) -> RoutesEntry {
    RoutesEntry {
        plugin: key.to_string(),
        mount: Arc::new(FelixRoutes { plugin, felix }),
        self_authenticating,
        body_limit,
    }
}
