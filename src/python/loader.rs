//! Importing a plugin directory and running its `register(ctx)`.

use pyo3::prelude::*;

use crate::dialects::flowly::{PluginContext, Registration};
use crate::python::{describe, runtime};

/// Import `dir` as its own package and call `register(ctx)` once.
///
/// On success returns what it registered; on any failure (import error, no
/// `register`, an exception inside it) returns `<ExceptionType>: <message>`
/// and leaves nothing registered and none of its modules imported.
pub fn load_plugin(key: &str, dir: &std::path::Path) -> Result<Vec<Registration>, String> {
    crate::python::attach(|py| {
        let rt = runtime();
        let slug = unique_package(key);
        let init = dir.join("__init__.py");
        let module = rt
            .import_plugin
            .bind(py)
            .call1((
                &slug,
                dir.to_string_lossy().as_ref(),
                init.to_string_lossy().as_ref(),
            ))
            .map_err(|e| describe(py, &e))?;
        let fail = |message: String| {
            let _ = rt.forget_plugin.bind(py).call1((&slug,));
            message
        };
        let register =
            match module.getattr("register") {
                Ok(r) if r.is_callable() => r,
                Ok(_) => {
                    return Err(fail(
                        "TypeError: register in __init__.py is not callable".into(),
                    ))
                }
                Err(_) => return Err(fail(
                    "AttributeError: the plugin's __init__.py defines no register(ctx) function"
                        .into(),
                )),
            };
        let ctx = Py::new(py, PluginContext::new(key, dir)).map_err(|e| describe(py, &e))?;
        let outcome = register.call1((ctx.clone_ref(py),));
        let registrations = ctx.borrow(py).finish();
        match outcome {
            Err(e) => Err(fail(describe(py, &e))),
            Ok(ret) if crate::python::bridge::is_awaitable(&ret) => {
                // Close the coroutine so Python does not warn it was never awaited.
                let _ = ret.call_method0("close");
                Err(fail(
                    "TypeError: register(ctx) must be a plain function, not async".into(),
                ))
            }
            Ok(_) => Ok(registrations),
        }
    })
}

/// The package name for a load of `key`: its slug, with a suffix when this
/// process already loaded a plugin under that slug (another host), so two
/// hosts never share or replace each other's plugin modules.
fn unique_package(key: &str) -> String {
    static LOADS: std::sync::Mutex<Option<std::collections::HashMap<String, u32>>> =
        std::sync::Mutex::new(None);
    let base = slug(key);
    let mut loads = LOADS.lock().unwrap_or_else(|e| e.into_inner());
    let count = loads
        .get_or_insert_with(Default::default)
        .entry(base.clone())
        .or_insert(0);
    *count += 1;
    if *count == 1 {
        base
    } else {
        format!("{base}__{count}")
    }
}

/// A Python identifier made from a plugin key (`my-plugin` → `my_plugin`).
pub fn slug(key: &str) -> String {
    let mut s: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, 'p');
    }
    s
}
