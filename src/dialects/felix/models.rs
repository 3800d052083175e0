//! Felix's model providers (`register_model_provider(name, factory)`, on
//! the plugin registry or `felix.patterns.model_registry`): each one a
//! plughost model provider, `--model NAME:MODEL`, whose calls run the
//! plugin's client (`_plughost_felix.model_chat`: the factory's client,
//! awaited `chat(messages, tools, opts)` with Felix's types).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyModule;
use serde_json::Value;

use crate::core::model_profiles::{CodeHandle, ModelProfile, PluginModel, Transport};
use crate::core::points::BoxFuture;
use crate::runtime::bridge::{self, Awaited};
use crate::runtime::{plugin_error, try_attach};

struct FelixModel {
    name: String,
    factory: Py<PyAny>,
    felix: Py<PyModule>,
}

impl PluginModel for FelixModel {
    fn chat(&self, model: String, request: Value) -> BoxFuture<Result<Value, String>> {
        let started = try_attach(|py| -> Result<Awaited, String> {
            let request = pythonize::pythonize(py, &request).map_err(|e| e.to_string())?;
            let call = self
                .felix
                .bind(py)
                .getattr("model_chat")
                .and_then(|f| f.call1((self.factory.bind(py), &self.name, &model, request)))
                .map_err(|e| plugin_error(py, &e).described())?;
            Ok(bridge::resolve(py, call))
        });
        Box::pin(async move {
            let outcome = match started.map_err(|e| e.to_string())?? {
                Awaited::Ready(r) => r,
                Awaited::Pending(task) => task.await,
            };
            try_attach(|py| match outcome {
                Ok(answer) => {
                    crate::runtime::value::to_json(answer.bind(py)).map_err(|e| e.to_string())
                }
                Err(e) => Err(plugin_error(py, &e).described()),
            })
            .map_err(|e| e.to_string())?
        })
    }
}

/// The profile of provider `name` plugin `plugin` registered.
pub fn profile(
    plugin: &str,
    name: String,
    factory: Py<PyAny>,
    felix: Py<PyModule>,
) -> ModelProfile {
    ModelProfile {
        name: name.clone(),
        aliases: Vec::new(),
        plugin: plugin.to_string(),
        dialect: super::discover::DIALECT.to_string(),
        base_url: String::new(),
        base_url_var: None,
        headers: Vec::new(),
        key_vars: Vec::new(),
        models: Vec::new(),
        transport: Transport::Plugin,
        auth: String::new(),
        code: CodeHandle(Some(Arc::new(FelixModel {
            name,
            factory,
            felix,
        }))),
    }
}
