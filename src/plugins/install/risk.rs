//! What a plugin will be able to do, from what it declares, shown at
//! install as Flowly's marketplace risk badges are; and what it registered
//! beyond what it declared.
//!
//! The badges: hooks that see every model call (`pre_llm_call`,
//! `post_llm_call`, `pre_api_request`, …), hooks that rewrite results
//! (`result_rewrite` and `exec_output_rewrite`, `pre_tool_call`, which can block or change a call),
//! tools that shadow built-in ones, and the network and file access a
//! manifest declares (`capabilities`, `permissions`, `network`, `files`
//! of a Hermes or Flowly manifest; plughost enforces none of them — they
//! are the author's word, shown so the user can judge).
//!
//! Strictness: a plugin that registers a hook or tool its manifest does
//! not list (`provides_hooks`, `provides_tools`) is reported by `plugins
//! doctor` and at install, and refused at install when config.json's
//! `plugins.strict_hooks` is true (Hermes's `plugins.strict_hooks`, which
//! plughost reads from the same place for every dialect).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::plugins::lock::Capabilities;

/// Hooks that see every model request or reply.
const MODEL_HOOKS: &[&str] = &[
    "pre_llm_call",
    "post_llm_call",
    "pre_api_request",
    "post_api_request",
    "transform_llm_output",
];

/// Hooks that can change or block what the agent does or sees.
const REWRITING_HOOKS: &[&str] = &[
    "pre_tool_call",
    "transform_tool_result",
    "transform_terminal_output",
    "transform_llm_output",
    "pre_gateway_dispatch",
];

/// One line of the summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Badge {
    /// `model`, `rewrite`, `shadow`, `network`, `files`, `env`.
    pub kind: &'static str,
    pub text: String,
}

/// The badges of a plugin declaring `caps` (and the raw manifest of
/// `dir`, for its declared access), given the built-in tool names.
pub fn badges(caps: &Capabilities, dir: &Path, builtins: &[String]) -> Vec<Badge> {
    let mut out = Vec::new();
    let pick = |set: &[&str]| -> Vec<String> {
        caps.hooks
            .iter()
            .filter(|h| set.contains(&h.as_str()))
            .cloned()
            .collect()
    };
    let model = pick(MODEL_HOOKS);
    if !model.is_empty() {
        out.push(Badge {
            kind: "model",
            text: format!("sees every model call ({})", model.join(", ")),
        });
    }
    let rewrite = pick(REWRITING_HOOKS);
    if !rewrite.is_empty() {
        out.push(Badge {
            kind: "rewrite",
            text: format!(
                "can block or rewrite calls and results ({})",
                rewrite.join(", ")
            ),
        });
    }
    let shadow: Vec<String> = caps
        .tools
        .iter()
        .filter(|t| builtins.contains(t))
        .cloned()
        .collect();
    if !shadow.is_empty() {
        out.push(Badge {
            kind: "shadow",
            text: format!("replaces built-in tools ({})", shadow.join(", ")),
        });
    }
    let declared = declared_access(dir);
    for (kind, what) in [("network", &declared.0), ("files", &declared.1)] {
        if !what.is_empty() {
            out.push(Badge {
                kind,
                text: format!("declares {kind} access ({})", what.join(", ")),
            });
        }
    }
    out
}

/// The network and file access a manifest declares: `capabilities` /
/// `permissions` lists or mappings naming them, `network:` / `files:`.
fn declared_access(dir: &Path) -> (Vec<String>, Vec<String>) {
    let Some(root) = raw_manifest(dir) else {
        return Default::default();
    };
    let (mut net, mut files) = (Vec::new(), Vec::new());
    let mut note = |key: &str, value: &Value| {
        let k = key.to_ascii_lowercase();
        let text = match value {
            Value::Bool(true) | Value::Null => key.to_string(),
            Value::Bool(false) => return,
            Value::String(s) => format!("{key}: {s}"),
            other => format!("{key}: {other}"),
        };
        if ["network", "net", "http", "internet", "web"]
            .iter()
            .any(|n| k.contains(n))
        {
            net.push(text);
        } else if ["file", "fs", "filesystem", "disk", "read", "write"]
            .iter()
            .any(|n| k.contains(n))
        {
            files.push(text);
        }
    };
    for field in ["capabilities", "permissions"] {
        match root.get(field) {
            Some(Value::Array(items)) => {
                for i in items.iter().filter_map(Value::as_str) {
                    note(i, &Value::Null);
                }
            }
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    note(k, v);
                }
            }
            _ => {}
        }
    }
    for field in ["network", "files"] {
        if let Some(v) = root.get(field) {
            note(field, v);
        }
    }
    (net, files)
}

fn raw_manifest(dir: &Path) -> Option<Value> {
    let path = crate::plugins::manifest::MANIFEST_FILES
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())?;
    let text = std::fs::read_to_string(&path).ok()?;
    if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).ok()
    } else {
        serde_saphyr::from_str(&text).ok()
    }
}

/// The one-screen summary printed at install.
pub fn summary(name: &str, badges: &[Badge]) -> String {
    if badges.is_empty() {
        return format!("{name} declares no hooks on model calls, no rewriting hooks, no built-in tool replacements and no network or file access.");
    }
    let mut text = format!("What {name} will be able to do (from its manifest):");
    for b in badges {
        text.push_str(&format!("\n  [{}] {}", b.kind, b.text));
    }
    text
}

/// What a plugin registered that its manifest does not declare.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Undeclared {
    pub hooks: Vec<String>,
    pub tools: Vec<String>,
}

impl Undeclared {
    /// Registered `hooks` and `tools` not in `declared`. A manifest that
    /// lists no hooks (or no tools) at all made no claim about them and is
    /// not reported for them, unless `strict` (then every registration
    /// must be declared).
    pub fn between(
        declared: &Capabilities,
        hooks: &[String],
        tools: &[String],
        strict: bool,
    ) -> Undeclared {
        let not_in = |list: &[String], known: &[String]| -> Vec<String> {
            if known.is_empty() && !strict {
                return Vec::new();
            }
            list.iter()
                .filter(|x| !known.contains(x))
                .cloned()
                .collect()
        };
        Undeclared {
            hooks: not_in(hooks, &declared.hooks),
            tools: not_in(tools, &declared.tools),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty() && self.tools.is_empty()
    }

    /// `hooks a, b; tools c`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.hooks.is_empty() {
            parts.push(format!(
                "hooks {} (not in provides_hooks)",
                self.hooks.join(", ")
            ));
        }
        if !self.tools.is_empty() {
            parts.push(format!(
                "tools {} (not in provides_tools)",
                self.tools.join(", ")
            ));
        }
        parts.join("; ")
    }
}

/// Why `plugins.strict_hooks` refuses a plugin that registered
/// `registrations` while its manifest declares what `manifest` says;
/// `None` when strictness is off or everything is declared.
pub fn strict_refusal(
    home: &Path,
    manifest: Option<&crate::plugins::manifest::Manifest>,
    registrations: &[crate::core::registry::Registration],
) -> Option<String> {
    use crate::core::registry::Registration;
    // --- changed by h5 --- (strict_hooks may come from Hermes's config.yaml)
    let source = strict_hooks_source(home)?;
    let declared = manifest
        .map(|m| Capabilities {
            hooks: m.provides_hooks.clone(),
            tools: m.provides_tools.clone(),
            web_providers: Vec::new(),
        })
        .unwrap_or_default();
    let (mut hooks, mut tools) = (Vec::new(), Vec::new());
    for r in registrations {
        match r {
            Registration::Hook { name, .. } if !hooks.contains(name) => hooks.push(name.clone()),
            Registration::Tool(t) => tools.push(t.spec.name.clone()),
            _ => {}
        }
    }
    let undeclared = Undeclared::between(&declared, &hooks, &tools, true);
    (!undeclared.is_empty()).then(|| {
        format!(
            "plugins.strict_hooks in {source} refuses it: it registers what its manifest does not declare: {} (declare them in its manifest, or turn strict_hooks off)",
            undeclared.describe()
        )
    })
}

/// `plugins.strict_hooks` of config.json, else of Hermes's config.yaml
/// (false when absent or not a bool in both).
pub fn strict_hooks(home: &Path) -> bool {
    strict_hooks_source(home).is_some()
}

/// Which file turned `plugins.strict_hooks` on (`config.json`, else
/// Hermes's `config.yaml` when config.json does not set it); `None`: off.
pub fn strict_hooks_source(home: &Path) -> Option<&'static str> {
    // Once per build of a host (asked for each plugin it loads), which
    // sees one version of the files anyway.
    crate::plugins::snapshot::derived("strict_hooks", &home.to_string_lossy(), || {
        strict_hooks_source_now(home)
    })
}

fn strict_hooks_source_now(home: &Path) -> Option<&'static str> {
    use crate::plugins::atomic::{file_stamp, FileStamp};
    use std::sync::Mutex;
    type Stamp = Option<FileStamp>;
    // Asked once per plugin a start loads: the answer is kept while both
    // files are as they were (a `stat` each instead of reading and parsing
    // them, which was 2 % of `plugins list` with 100 plugins).
    /// The config file, its stamp and Hermes's config.yaml's, the answer.
    type Seen = (PathBuf, Stamp, Stamp, Option<&'static str>);
    static LAST: Mutex<Option<Seen>> = Mutex::new(None);
    let config = crate::plugins::config::config_path(home);
    let yaml = crate::plugins::config::hermes_yaml::hermes_home().join("config.yaml");
    let stamps = (file_stamp(&config), file_stamp(&yaml));
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((path, own, hermes, answer)) = &*last {
        // A file with no modification time (None) is read every time.
        if *path == config && own.is_some() && (*own, *hermes) == stamps {
            return *answer;
        }
    }
    let answer = read_strict_hooks_source(home);
    *last = Some((config, stamps.0, stamps.1, answer));
    answer
}

fn read_strict_hooks_source(home: &Path) -> Option<&'static str> {
    let path = crate::plugins::config::config_path(home);
    let own = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v.get("plugins")?.get("strict_hooks")?.as_bool());
    match own {
        Some(on) => on.then_some("config.json"),
        None => crate::plugins::config::hermes_yaml::read()
            .strict_hooks
            .filter(|on| *on)
            .map(|_| "Hermes's config.yaml"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn badges_and_undeclared() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("plugin.yaml"),
            "name: p\ncapabilities: [network, read_files]\n",
        )
        .unwrap();
        let caps = Capabilities {
            hooks: vec!["pre_llm_call".into(), "transform_tool_result".into()],
            tools: vec!["exec".into(), "mine".into()],
            web_providers: vec![],
        };
        let b = badges(&caps, dir.path(), &["exec".to_string()]);
        let kinds: Vec<&str> = b.iter().map(|b| b.kind).collect();
        assert_eq!(kinds, ["model", "rewrite", "shadow", "network", "files"]);
        let none = Capabilities::default();
        assert!(Undeclared::between(&none, &["a".into()], &[], false).is_empty());
        assert!(!Undeclared::between(&none, &["a".into()], &[], true).is_empty());
        let u = Undeclared::between(&caps, &["on_session_start".into()], &["mine".into()], false);
        assert_eq!(u.hooks, ["on_session_start"]);
        assert!(u.tools.is_empty());
    }
}
