//! Tools beyond what its plugins registered when they loaded: tools the
//! dialect offers itself, tools its plugins register while running, and
//! how its tools' results read.

use std::path::Path;
use std::sync::Arc;

use super::super::DIALECTS;
use crate::core::outcome::Renderer;
use crate::core::registry::Tool;

/// A dialect that offers tools of its own.
pub trait BuiltinTools: Send + Sync {
    /// Tools the dialect itself offers the agents of the host at `home`,
    /// registered as `owner`'s (Flowly's `web_search` / `web_extract`,
    /// served by web backend plugins).
    fn builtin_tools(&self, home: &Path, owner: &str) -> Vec<Tool>;
}

/// A dialect whose plugins register tools while running (looked up by
/// name when a tool is not in the registry).
pub trait RunningTools: Send + Sync {
    /// The tool `name` one of its plugins registered while running in the
    /// host (or worker) at `home`.
    fn runtime_tool(&self, home: &Path, name: &str) -> Option<Tool>;
    /// How such a tool's results read.
    fn renderer(&self) -> Option<Arc<dyn Renderer>> {
        None
    }
}

/// A dialect whose tools' results read its own way.
pub trait Renderers: Send + Sync {
    /// How its tools' failed outcomes read, when not plughost's way (its
    /// tools carry it in-process; isolated ones get it from here).
    fn renderer(&self) -> Option<Arc<dyn Renderer>> {
        None
    }
    /// How the results of its tools that render their own read (a
    /// Rust renderer cannot cross from a worker: an isolated tool says it
    /// has one and plughost uses this). Default: [`Renderers::renderer`].
    fn own_renderer(&self) -> Option<Arc<dyn Renderer>> {
        self.renderer()
    }
}

/// Every dialect's built-in tools for the host at `home`, in table order.
pub fn builtin_tools(home: &Path, owner: &str) -> Vec<Tool> {
    DIALECTS
        .iter()
        .filter_map(|d| d.abilities().builtin_tools)
        .flat_map(|b| b.builtin_tools(home, owner))
        .collect()
}
