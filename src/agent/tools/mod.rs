//! Built-in tools: `read_file`, `write_file`, `edit_file`, `list_dir`,
//! `exec` and `delegate`, and Flowly's `web_search` / `web_extract`
//! ([`web_tools`], served by the web backend plugins). Registered like plugin tools (owner `builtin`), so
//! a plugin may override one by name (with a warning).
//!
//! File tools are confined to a workspace directory by construction (see
//! `workspace.rs`): paths are opened relative to a handle of the workspace,
//! and one that leaves it (`..`, an absolute path elsewhere, a symlink
//! pointing out) cannot be followed. `exec` runs `sh -c` in the workspace
//! with a timeout and an output cap; what a shell command itself touches
//! cannot be confined, which is what `pre_tool_call` hooks are for.

mod delegate;
mod exec;
mod files;
mod web;
mod workspace;

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::core::registry::{Tool, ToolSpec};

pub use delegate::{delegate_tool, DelegateSlot, SubagentRunner};
pub use web::web_tools;
pub use workspace::Workspace;

/// Owner name of the built-in tools.
pub const BUILTIN_OWNER: &str = "builtin";

/// Limits of the built-in tools.
#[derive(Clone, Debug)]
pub struct ToolLimits {
    /// Default `exec` timeout (a call may ask for less, or more up to `exec_timeout_max`).
    pub exec_timeout: Duration,
    pub exec_timeout_max: Duration,
    /// Bytes of command output kept (head and tail).
    pub exec_output_cap: usize,
    /// Bytes `read_file` returns at most.
    pub read_cap: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            exec_timeout: Duration::from_secs(60),
            exec_timeout_max: Duration::from_secs(600),
            exec_output_cap: 16 * 1024,
            read_cap: 256 * 1024,
        }
    }
}

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        parameters,
        plugin: BUILTIN_OWNER.into(),
        ..Default::default()
    }
}

fn text_arg<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("missing string argument '{key}'"))
}

/// Every tool an agent of the host at `home` offers besides its plugins':
/// the built-ins, `delegate` (connected later through `slot`) and Flowly's
/// web tools (available while a web backend plugin's provider is). The
/// CLI's agent and the wheel's `Host(builtin_tools=True)` both take these.
pub fn agent_tools(
    workspace: &Workspace,
    home: &std::path::Path,
    slot: &DelegateSlot,
) -> Vec<Tool> {
    let mut all = builtin_tools(workspace, &ToolLimits::default());
    all.push(delegate_tool(slot));
    all.extend(web_tools(home));
    all
}

/// Everything but `delegate`, whose handler needs the agent (see [`DelegateSlot`]).
pub fn builtin_tools(workspace: &Workspace, limits: &ToolLimits) -> Vec<Tool> {
    let read_cap = limits.read_cap;
    vec![
        files::file_tool(
            workspace,
            spec(
                "read_file",
                "Read a text file in the workspace.",
                json!({"type": "object", "properties": {"path": {"type": "string", "description": "Path relative to the workspace"}}, "required": ["path"]}),
            ),
            move |ws, args| files::read_file(ws, args, read_cap),
        ),
        files::file_tool(
            workspace,
            spec(
                "write_file",
                "Create or overwrite a file in the workspace (parent directories are created).",
                json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}),
            ),
            files::write_file,
        ),
        files::file_tool(
            workspace,
            spec(
                "edit_file",
                "Replace an exact string in a workspace file (it must occur once unless replace_all).",
                json!({"type": "object", "properties": {
                    "path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"},
                    "replace_all": {"type": "boolean", "default": false}}, "required": ["path", "old_string", "new_string"]}),
            ),
            files::edit_file,
        ),
        files::file_tool(
            workspace,
            spec(
                "list_dir",
                "List a workspace directory (directories end with '/').",
                json!({"type": "object", "properties": {"path": {"type": "string", "default": "."}}}),
            ),
            files::list_dir,
        ),
        exec::exec_tool(workspace, limits),
    ]
}
