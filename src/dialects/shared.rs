//! Mechanics every Python dialect needs the same way: finding and calling
//! a plugin's `register`, calling a `check_fn`, resolving a skill's path.
//! Each dialect keeps its own messages and conventions around them.

use std::path::{Path, PathBuf};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyModule;

use crate::core::outcome::PluginError;
use crate::runtime::{plugin_error, try_attach};

/// A loading failure of plughost's own making (not a Python exception).
pub fn load_error(kind: &str, message: &str) -> PluginError {
    PluginError {
        kind: kind.into(),
        message: message.into(),
        ..Default::default()
    }
}

/// The module's `register` function; `missing` explains its absence.
pub fn register_function<'py>(
    module: &Bound<'py, PyModule>,
    missing: &str,
) -> Result<Bound<'py, PyAny>, PluginError> {
    match module.getattr("register") {
        Ok(r) if r.is_callable() => Ok(r),
        Ok(_) => Err(load_error(
            "TypeError",
            "register in __init__.py is not callable",
        )),
        Err(_) => Err(load_error("AttributeError", missing)),
    }
}

/// What `register(ctx)` returning `outcome` means for the load: its
/// exception, or a refusal of an `async def register` (closed, so Python
/// does not warn that it was never awaited).
pub fn registered(py: Python<'_>, outcome: PyResult<Bound<'_, PyAny>>) -> Result<(), PluginError> {
    match outcome {
        Err(e) => Err(plugin_error(py, &e)),
        Ok(ret) if crate::runtime::bridge::is_awaitable(&ret) => {
            let _ = ret.call_method0("close");
            Err(load_error(
                "TypeError",
                "register(ctx) must be a plain function, not async",
            ))
        }
        Ok(_) => Ok(()),
    }
}

/// Call a tool's `check_fn()`: its truth, or its failure.
pub fn call_check_fn(check: &Py<PyAny>) -> Result<bool, PluginError> {
    try_attach(|py| {
        check
            .bind(py)
            .call0()
            .and_then(|r| r.is_truthy())
            .map_err(|e| plugin_error(py, &e))
    })
    .unwrap_or_else(|e| Err(PluginError::native(e.to_string())))
}

/// Why a `register_skill` name is refused; each dialect words it its own
/// way (the messages are contracts), so only the rule lives here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillNameProblem {
    /// A `:`, which would forge the `plugin:` namespace added for it.
    Colon,
    /// Empty, or a character outside `[A-Za-z0-9_-]`.
    Invalid,
}

/// The rule both Flowly and Hermes apply to a skill's name: no `:`, and
/// one or more of `[A-Za-z0-9_-]` (the colon is checked first, as they do).
pub fn skill_name_problem(name: &str) -> Option<SkillNameProblem> {
    if name.contains(':') {
        Some(SkillNameProblem::Colon)
    } else if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        Some(SkillNameProblem::Invalid)
    } else {
        None
    }
}

/// A skill's file: `path` (a str or `os.PathLike`) against the plugin's
/// directory, and a directory's `SKILL.md`. Whether it exists is for the
/// dialect to say, in its own words.
pub fn skill_path(path: &Bound<'_, PyAny>, plugin_dir: &Path) -> PyResult<PathBuf> {
    let fspath = path.py().import("os")?.getattr("fspath")?.call1((path,))?;
    let given: PathBuf = fspath
        .extract::<String>()
        .map(PathBuf::from)
        .map_err(|_| PyTypeError::new_err("register_skill: path must be a str or os.PathLike"))?;
    let resolved = if given.is_absolute() {
        given
    } else {
        plugin_dir.join(given)
    };
    Ok(if resolved.is_dir() {
        resolved.join("SKILL.md")
    } else {
        resolved
    })
}

#[cfg(test)]
mod tests {
    use super::{skill_name_problem, SkillNameProblem};

    #[test]
    fn skill_names() {
        assert_eq!(skill_name_problem("guide_2-x"), None);
        assert_eq!(skill_name_problem("a:b"), Some(SkillNameProblem::Colon));
        // The colon wins over other invalid characters.
        assert_eq!(skill_name_problem("a b:c"), Some(SkillNameProblem::Colon));
        assert_eq!(skill_name_problem(""), Some(SkillNameProblem::Invalid));
        assert_eq!(skill_name_problem("a b"), Some(SkillNameProblem::Invalid));
        assert_eq!(skill_name_problem("é"), Some(SkillNameProblem::Invalid));
    }
}
