//! Felix's `register_authenticator(mode, builder)`: a mode `plughost serve
//! --auth MODE` selects, judging each request as Felix's middleware does
//! (`_plughost_felix.authenticate`: `builder(settings)`, then its
//! `authenticate(request)` with a Starlette `Request`; an `AuthContext`
//! accepts, a Starlette response refuses and is sent as it is).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyModule;

use crate::core::hooks::BoxFuture;
use crate::core::http_app::{AppRequest, AuthAnswer, AuthMode, Authenticator};
use crate::core::outcome::PluginError;
use crate::runtime::{asgi, try_attach};

struct FelixAuthenticator {
    builder: Py<PyAny>,
    felix: Py<PyModule>,
}

impl Authenticator for FelixAuthenticator {
    fn authenticate(&self, request: AppRequest) -> BoxFuture<Result<AuthAnswer, PluginError>> {
        let (builder, felix) =
            match try_attach(|py| (self.builder.clone_ref(py), self.felix.clone_ref(py))) {
                Ok(pair) => pair,
                Err(e) => return Box::pin(async move { Err(PluginError::native(e.to_string())) }),
            };
        let run = asgi::run_collected(&request, move |py, connection, emit| {
            felix
                .bind(py)
                .getattr("authenticate")?
                .call1((builder.bind(py), connection, emit))
        });
        Box::pin(async move {
            let (value, response) = run.await?;
            if let Some(response) = response {
                return Ok(AuthAnswer::Refused(response));
            }
            let subject = try_attach(|py| value.bind(py).extract::<Option<String>>())
                .map_err(|e| PluginError::native(e.to_string()))?
                .map_err(|e| PluginError::native(e.to_string()))?;
            match subject {
                Some(subject) => Ok(AuthAnswer::Accepted { subject }),
                None => Err(PluginError::native(
                    "the authenticator neither accepted nor answered the request",
                )),
            }
        })
    }
}

/// The auth mode of one `(mode, builder)` `_plughost_felix.load` returned.
pub(super) fn mode(key: &str, mode: String, builder: Py<PyAny>, felix: Py<PyModule>) -> AuthMode {
    AuthMode {
        mode,
        plugin: key.to_string(),
        authenticator: Arc::new(FelixAuthenticator { builder, felix }),
    }
}
