//! plughost's built-in tools under the names and argument shapes Hermes
//! gives its own (`tools/terminal_tool.py`, `tools/file_tools.py`,
//! `tools/delegate_tool.py` of NousResearch/hermes-agent), so a Hermes
//! guard written for `terminal` protects `exec` too. Only the Hermes
//! dialect's hook adapter ([`super::hooks`]) and its `dispatch_tool`
//! ([`super::link`]) translate; the core and the other dialects see
//! plughost's names.
//!
//! | plughost | Hermes | arguments |
//! |---|---|---|
//! | `exec` | `terminal` | `command`, `timeout`; `cwd` is `workdir` |
//! | `edit_file` | `patch` | `mode: "replace"`, `path`, `old_string`, `new_string`, `replace_all` |
//! | `list_dir` | `search_files` | `target: "files"`, `pattern: "*"`, `path` |
//! | `delegate` | `delegate_task` | `task` is `goal`; `tools` as given |
//! | `read_file`, `write_file`, `web_search`, `web_extract` | the same | the same |

use serde_json::{Map, Value};

/// A built-in whose Hermes name or arguments differ from plughost's.
struct Renamed {
    plughost: &'static str,
    hermes: &'static str,
    /// Argument keys renamed: (plughost's, Hermes's).
    keys: &'static [(&'static str, &'static str)],
    /// Keys Hermes's shape has that plughost's lacks, with the value
    /// that stands for plughost's behaviour.
    fixed: &'static [(&'static str, &'static str)],
}

const RENAMED: &[Renamed] = &[
    Renamed {
        plughost: "exec",
        hermes: "terminal",
        keys: &[("cwd", "workdir")],
        fixed: &[],
    },
    Renamed {
        plughost: "edit_file",
        hermes: "patch",
        keys: &[],
        fixed: &[("mode", "replace")],
    },
    Renamed {
        plughost: "list_dir",
        hermes: "search_files",
        keys: &[],
        fixed: &[("target", "files"), ("pattern", "*")],
    },
    Renamed {
        plughost: "delegate",
        hermes: "delegate_task",
        keys: &[("task", "goal")],
        fixed: &[],
    },
];

fn by_plughost(name: &str) -> Option<&'static Renamed> {
    RENAMED.iter().find(|r| r.plughost == name)
}

/// The name a Hermes hook sees for plughost's tool `name` (itself when
/// Hermes calls it the same).
pub fn hermes_name(name: &str) -> &str {
    by_plughost(name).map_or(name, |r| r.hermes)
}

/// Whether Hermes sees `name` other than plughost calls it (a view of its
/// arguments is built for Hermes hooks only then).
pub fn translated(name: &str) -> bool {
    by_plughost(name).is_some()
}

/// plughost's arguments of `name` in Hermes's shape.
pub fn to_hermes(name: &str, args: &Map<String, Value>) -> Map<String, Value> {
    let Some(r) = by_plughost(name) else {
        return args.clone();
    };
    let mut out = Map::new();
    for (k, v) in args {
        let key = r
            .keys
            .iter()
            .find(|(p, _)| p == k)
            .map_or(k.as_str(), |(_, h)| h);
        out.insert(key.to_string(), v.clone());
    }
    for (k, v) in r.fixed {
        out.entry(k.to_string())
            .or_insert_with(|| Value::String(v.to_string()));
    }
    out
}

/// Why Hermes-shaped arguments of a renamed tool cannot run as plughost's.
#[derive(Debug, PartialEq, Eq)]
pub struct NoCounterpart {
    pub key: &'static str,
    pub value: String,
}

/// Hermes-shaped arguments of plughost's tool `name` back in plughost's
/// shape. A fixed key with another value (`patch` in `mode: "patch"`,
/// `search_files` for content) is an error: plughost's tool cannot do it.
pub fn to_plughost(
    name: &str,
    args: &Map<String, Value>,
) -> Result<Map<String, Value>, NoCounterpart> {
    let Some(r) = by_plughost(name) else {
        return Ok(args.clone());
    };
    let mut out = Map::new();
    for (k, v) in args {
        if let Some((key, fixed)) = r.fixed.iter().find(|(f, _)| f == k) {
            if v.as_str() != Some(fixed) && !v.is_null() {
                return Err(NoCounterpart {
                    key,
                    value: v.to_string(),
                });
            }
            continue;
        }
        let key = r
            .keys
            .iter()
            .find(|(_, h)| h == k)
            .map_or(k.as_str(), |(p, _)| p);
        out.insert(key.to_string(), v.clone());
    }
    Ok(out)
}

/// A built-in's name and arguments in plughost's shape.
pub type BuiltinCall = (&'static str, Map<String, Value>);

/// The built-in a Hermes `dispatch_tool(name, …)` stands for, when no tool
/// of that name is registered: plughost's name and arguments, or why
/// plughost's tool cannot do what was asked. `None` when `name` is not a
/// Hermes name of a built-in.
pub fn from_hermes_call(
    name: &str,
    args: &Map<String, Value>,
) -> Option<Result<BuiltinCall, NoCounterpart>> {
    let r = RENAMED.iter().find(|r| r.hermes == name)?;
    // Hermes's `search_files` searches contents unless told `target: files`.
    if name == "search_files" && args.get("target").and_then(Value::as_str) != Some("files") {
        return Some(Err(NoCounterpart {
            key: "target",
            value: "\"content\"".into(),
        }));
    }
    Some(to_plughost(r.plughost, args).map(|a| (r.plughost, a)))
}

/// The table for `docs/hermes.md` and `plugins doctor`: (plughost, Hermes).
pub fn table() -> impl Iterator<Item = (&'static str, &'static str)> {
    RENAMED.iter().map(|r| (r.plughost, r.hermes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn exec_is_terminal_and_back() {
        let p = map(json!({"command": "cat .env", "cwd": "sub", "timeout": 5}));
        let h = to_hermes("exec", &p);
        assert_eq!(
            Value::Object(h.clone()),
            json!({"command": "cat .env", "workdir": "sub", "timeout": 5})
        );
        assert_eq!(hermes_name("exec"), "terminal");
        assert_eq!(to_plughost("exec", &h).unwrap(), p);
    }

    #[test]
    fn edit_file_is_patch_in_replace_mode() {
        let p = map(json!({"path": "a", "old_string": "x", "new_string": "y"}));
        let h = to_hermes("edit_file", &p);
        assert_eq!(h["mode"], "replace");
        assert_eq!(to_plughost("edit_file", &h).unwrap(), p);
        let v4a = map(json!({"mode": "patch", "patch": "*** Begin Patch"}));
        assert_eq!(
            from_hermes_call("patch", &v4a).unwrap().unwrap_err().key,
            "mode"
        );
    }

    #[test]
    fn delegate_task_goal_and_list_dir_search() {
        let (name, args) = from_hermes_call("delegate_task", &map(json!({"goal": "g"})))
            .unwrap()
            .unwrap();
        assert_eq!(
            (name, Value::Object(args)),
            ("delegate", json!({"task": "g"}))
        );
        let h = to_hermes("list_dir", &map(json!({"path": "src"})));
        assert_eq!(
            Value::Object(h),
            json!({"path": "src", "target": "files", "pattern": "*"})
        );
        assert!(
            from_hermes_call("search_files", &map(json!({"pattern": "*"})))
                .unwrap()
                .is_err()
        );
        assert!(from_hermes_call("read_file", &Map::new()).is_none());
        assert_eq!(hermes_name("read_file"), "read_file");
    }
}
