//! plughost's built-in tools under the names and input shapes Claude Code
//! gives its own, so a Claude Code hook written for `Bash` guards `exec`,
//! and an agent that lists `Read, Grep` gets `read_file`. Only the bundle
//! dialect's hooks and agents translate; the core sees plughost's names.
//!
//! | plughost | Claude Code | `tool_input` |
//! |---|---|---|
//! | `exec` | `Bash` | `command`; `timeout` in milliseconds (plughost's is seconds); `cwd` kept |
//! | `read_file` | `Read` | `file_path` (plughost's `path`, relative to the workspace) |
//! | `write_file` | `Write` | `file_path`, `content` |
//! | `edit_file` | `Edit` | `file_path`, `old_string`, `new_string`, `replace_all` |
//! | `list_dir` | `LS` | `path` |
//! | `web_search` | `WebSearch` | `query` |
//! | `web_extract` | `WebFetch` | `url` (the first of plughost's `urls`), `prompt: ""` |
//! | `delegate` | `Task` | `prompt` (plughost's `task`), `description`, `subagent_type` (plughost's `agent`) |
//! | `mcp_<server>_<tool>` | the same name | as given |
//!
//! Claude Code's `Glob`, `Grep`, `MultiEdit`, `NotebookEdit`, `TodoWrite`
//! and the rest have no plughost built-in: a matcher naming only them
//! never matches, and an agent listing them gets the tools above that it
//! lists. Any other tool (a plugin's) is shown under its own name.

use serde_json::{json, Map, Value};

/// One built-in whose Claude Code name or input differs.
struct Row {
    plughost: &'static str,
    claude: &'static str,
    /// Argument keys renamed: (plughost's, Claude Code's).
    keys: &'static [(&'static str, &'static str)],
}

const ROWS: &[Row] = &[
    Row {
        plughost: "exec",
        claude: "Bash",
        keys: &[],
    },
    Row {
        plughost: "read_file",
        claude: "Read",
        keys: &[("path", "file_path")],
    },
    Row {
        plughost: "write_file",
        claude: "Write",
        keys: &[("path", "file_path")],
    },
    Row {
        plughost: "edit_file",
        claude: "Edit",
        keys: &[("path", "file_path")],
    },
    Row {
        plughost: "list_dir",
        claude: "LS",
        keys: &[],
    },
    Row {
        plughost: "web_search",
        claude: "WebSearch",
        keys: &[],
    },
    Row {
        plughost: "web_extract",
        claude: "WebFetch",
        keys: &[],
    },
    Row {
        plughost: "delegate",
        claude: "Task",
        keys: &[("task", "prompt"), ("agent", "subagent_type")],
    },
];

/// The name a Claude Code hook sees for plughost's tool `name`.
pub fn claude_name(name: &str) -> &str {
    ROWS.iter()
        .find(|r| r.plughost == name)
        .map_or(name, |r| r.claude)
}

/// plughost's tool for Claude Code's `name` (itself when none is renamed).
pub fn plughost_name(name: &str) -> Option<&'static str> {
    ROWS.iter().find(|r| r.claude == name).map(|r| r.plughost)
}

/// plughost's arguments of `tool` in Claude Code's `tool_input` shape.
pub fn to_claude(tool: &str, args: &Value) -> Value {
    let Value::Object(args) = args else {
        return args.clone();
    };
    let Some(row) = ROWS.iter().find(|r| r.plughost == tool) else {
        return Value::Object(args.clone());
    };
    let mut out = Map::new();
    for (k, v) in args {
        let key = row
            .keys
            .iter()
            .find(|(p, _)| p == k)
            .map_or(k.as_str(), |(_, c)| c);
        out.insert(key.to_string(), v.clone());
    }
    match tool {
        "exec" => {
            if let Some(s) = args.get("timeout").and_then(Value::as_f64) {
                out.insert("timeout".into(), json!((s * 1000.0).round() as u64));
            }
        }
        "web_extract" => {
            let first = args
                .get("urls")
                .and_then(Value::as_array)
                .and_then(|u| u.first())
                .cloned()
                .unwrap_or(Value::Null);
            out.remove("urls");
            out.insert("url".into(), first);
            out.entry("prompt").or_insert(json!(""));
        }
        "delegate" => {
            out.entry("description").or_insert(json!(""));
        }
        _ => {}
    }
    Value::Object(out)
}

/// Claude Code's `tool_input` for plughost's `tool` back in plughost's
/// shape (a hook's `updatedInput`).
pub fn from_claude(tool: &str, input: &Value) -> Value {
    let Value::Object(input) = input else {
        return input.clone();
    };
    let Some(row) = ROWS.iter().find(|r| r.plughost == tool) else {
        return Value::Object(input.clone());
    };
    let mut out = Map::new();
    for (k, v) in input {
        let key = row
            .keys
            .iter()
            .find(|(_, c)| c == k)
            .map_or(k.as_str(), |(p, _)| p);
        out.insert(key.to_string(), v.clone());
    }
    match tool {
        "exec" => {
            if let Some(ms) = input.get("timeout").and_then(Value::as_f64) {
                out.insert("timeout".into(), json!(ms / 1000.0));
            }
            out.remove("description");
            out.remove("run_in_background");
        }
        "web_extract" => {
            if let Some(url) = out.remove("url") {
                out.insert("urls".into(), json!([url]));
            }
            out.remove("prompt");
        }
        "delegate" => {
            out.remove("description");
        }
        _ => {}
    }
    Value::Object(out)
}

/// The plughost tools an agent's `tools:` list grants (Claude Code names
/// or plughost's; unknown names dropped, duplicates once).
pub fn granted(names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        let tool = plughost_name(name)
            .map(str::to_string)
            .unwrap_or_else(|| name.clone());
        // Claude Code's search tools read files: plughost's closest is list_dir.
        let tool = match name.as_str() {
            "Glob" | "Grep" => "list_dir".to_string(),
            "MultiEdit" => "edit_file".to_string(),
            _ => tool,
        };
        if !out.contains(&tool) {
            out.push(tool);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_is_exec_and_paths_are_file_paths_both_ways() {
        assert_eq!(claude_name("exec"), "Bash");
        assert_eq!(claude_name("my_tool"), "my_tool");
        let args = json!({"command": "ls", "timeout": 2});
        let c = to_claude("exec", &args);
        assert_eq!(c, json!({"command": "ls", "timeout": 2000}));
        assert_eq!(
            from_claude("exec", &c),
            json!({"command": "ls", "timeout": 2.0})
        );
        let r = to_claude("read_file", &json!({"path": "a.txt"}));
        assert_eq!(r, json!({"file_path": "a.txt"}));
        assert_eq!(from_claude("read_file", &r), json!({"path": "a.txt"}));
        let w = to_claude("web_extract", &json!({"urls": ["https://x"]}));
        assert_eq!(w["url"], "https://x");
        assert_eq!(
            from_claude("web_extract", &w),
            json!({"urls": ["https://x"]})
        );
        assert_eq!(
            granted(&["Read".into(), "Grep".into(), "Glob".into(), "Bash".into()]),
            vec!["read_file", "list_dir", "exec"]
        );
    }
}
