//! Snapshot tests of the CLI output that people read: `plugins list`,
//! `plugins doctor`, `tools list` (text and `--json`) and the common errors;
//! `broken` shows a plugin that fails to load, `dormant` one not enabled.
//! A change to any of these texts shows up as a snapshot diff to review.
//!
//! Each test runs `plughost` in a fresh home; what differs between runs and
//! machines (temp paths, pids, timings, versions) is filtered out first.
//! Snapshots live in `tests/snapshots/`. To accept a deliberate change:
//! `INSTA_UPDATE=always cargo test --test cli_snapshots` (or `cargo insta
//! review`). A mismatch fails the test. With `CI` set (as `.ci/run` runs),
//! insta writes nothing (no `.snap.new`), so the working tree stays clean;
//! on a pass it writes nothing anywhere.
use crate::common;

use std::path::Path;
use std::process::Command;

use crate::common::{home_with, no_bundled, write_plugin};

/// One home per test: `demo` (enabled, a tool, a hook, a command, a skill),
/// `broken` (enabled, raises in `register()`), `dormant` (not enabled).
struct Home {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

const DEMO: &str = r#"
from flowly.agent.hooks import BlockAction

def register(ctx):
    ctx.register_tool("greet", {"parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
                      lambda name: f"Hello, {name}!", description="Greet someone")
    ctx.register_hook("pre_tool_call", lambda c: BlockAction("no greeting Mallory") if c.params.get("name") == "Mallory" else None)
    ctx.register_command("ping", lambda a: "pong" + (f" {a}" if a else ""), description="Round trip", args_hint="[text]")
    ctx.register_skill("howto", "SKILL.md", description="How to use demo")
"#;

const BROKEN: &str = r#"
def register(ctx):
    raise RuntimeError("the token store is offline")
"#;

const DORMANT: &str = r#"
def register(ctx):
    ctx.register_tool("snooze", {}, lambda: "zzz", description="Never enabled")
"#;

fn home() -> Home {
    let home = home_with(&["demo", "broken"]);
    let plugins = home.path().join("plugins");
    write_plugin(
        &plugins,
        "demo",
        "name: demo\nversion: 0.3.0\ndescription: Demo plugin\nauthor: tests\n",
        &[("__init__.py", DEMO), ("SKILL.md", "# How to\nUse it.\n")],
    );
    write_plugin(
        &plugins,
        "broken",
        "name: broken\nversion: 1.0.0\ndescription: Fails to load\n",
        &[("__init__.py", BROKEN)],
    );
    write_plugin(
        &plugins,
        "dormant",
        "name: dormant\ndescription: Installed, not enabled\n",
        &[("__init__.py", DORMANT)],
    );
    Home {
        home,
        bundled: no_bundled(),
    }
}

impl Home {
    /// Run plughost to its end; the exit code, stdout and stderr as one text.
    fn run(&self, args: &[&str]) -> String {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("NO_COLOR", "1")
            .env_remove("PLUGHOST_LOG")
            .env_remove("RUST_LOG")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
            .current_dir(self.home.path());
        let out = common::run_bounded(cmd, std::time::Duration::from_secs(60));
        format!(
            "exit: {}\n----- stdout -----\n{}----- stderr -----\n{}",
            out.status
                .code()
                .map_or_else(|| "signal".to_string(), |c| c.to_string()),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        )
    }

    /// insta settings that replace this run's paths and the machine's
    /// volatile facts by placeholders.
    fn settings(&self) -> insta::Settings {
        let mut s = insta::Settings::clone_current();
        s.set_prepend_module_to_snapshot(false);
        let mut filters: Vec<(String, &str)> = Vec::new();
        // sys.path first: the paths on it (a virtualenv in the repository)
        // would otherwise be replaced by placeholders with brackets in them.
        filters.push((r"(?m)^sys\.path: .*$".into(), "sys.path: [SYS.PATH]"));
        filters.push((r#""path": \[[^\]]*\]"#.into(), r#""path": ["[SYS.PATH]"]"#));
        for (path, name) in [
            (self.home.path(), "[HOME]"),
            (self.bundled.path(), "[BUNDLED]"),
        ] {
            filters.push((regex_escape(&path.to_string_lossy()), name));
            if let Ok(real) = path.canonicalize() {
                filters.push((regex_escape(&real.to_string_lossy()), name));
            }
        }
        let binary = Path::new(env!("CARGO_BIN_EXE_plughost"));
        filters.push((regex_escape(&binary.to_string_lossy()), "[PLUGHOST]"));
        filters.push((regex_escape(env!("CARGO_MANIFEST_DIR")), "[REPO]"));
        filters.push((regex_escape(env!("CARGO_PKG_VERSION")), "[VERSION]"));
        // Any other temp directory (a worker's, Python's).
        filters.push((r"/tmp/[\w.\-]+".into(), "[TMP]"));
        filters.push((r"\bpid[ =:]*\d+".into(), "pid [PID]"));
        filters.push((r"\b\d+(\.\d+)?\s?(ms|µs|us|ns)\b".into(), "[TIME]"));
        filters.push((r#""(\w+_)?ms": ?\d+(\.\d+)?"#.into(), r#""$1ms": "[TIME]""#));
        // The interpreter `plugins doctor` reports (text, then --json).
        filters.push((r"(?m)^python: .*$".into(), "python: [PYTHON]"));
        filters.push((r"(?m)^python prefix: .*$".into(), "python prefix: [PREFIX]"));
        filters.push((
            r#""version": "\d+\.\d+[^" ]* \([^"]*""#.into(),
            r#""version": "[PYTHON]""#,
        ));
        filters.push((
            r#""executable": "[^"]*""#.into(),
            r#""executable": "[PYTHON]""#,
        ));
        filters.push((r#""prefix": "[^"]*""#.into(), r#""prefix": "[PREFIX]""#));
        filters.push((r"Python \d+\.\d+(\.\d+)?\S*".into(), "Python [PYVERSION]"));
        filters.push((r"python\d+\.\d+".into(), "python[PYVERSION]"));
        for (regex, replacement) in filters {
            s.add_filter(&regex, replacement);
        }
        s
    }
}

/// Escape a literal for insta's regex filters.
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Snapshot `plughost ARGS` run in a fresh home, under `name`.
fn snapshot(name: &str, args: &[&str]) {
    let home = home();
    snapshot_in(&home, name, args);
}

fn snapshot_in(home: &Home, name: &str, args: &[&str]) {
    let text = home.run(args);
    home.settings().bind(|| {
        insta::assert_snapshot!(name, text, &format!("plughost {}", args.join(" ")));
    });
}

#[test]
fn plugins_list() {
    snapshot("plugins_list", &["plugins", "list"]);
}

#[test]
fn plugins_list_json() {
    snapshot("plugins_list_json", &["plugins", "list", "--json"]);
}

#[test]
fn plugins_doctor() {
    snapshot("plugins_doctor", &["plugins", "doctor"]);
}

#[test]
fn plugins_doctor_json() {
    snapshot("plugins_doctor_json", &["plugins", "doctor", "--json"]);
}

#[test]
fn tools_list() {
    snapshot("tools_list", &["tools", "list"]);
}

#[test]
fn tools_list_json() {
    snapshot("tools_list_json", &["tools", "list", "--json"]);
}

#[test]
fn error_unknown_command() {
    snapshot("error_unknown_command", &["frobnicate"]);
}

#[test]
fn error_unknown_tool() {
    snapshot("error_unknown_tool", &["tools", "call", "no_such_tool"]);
}

#[test]
fn error_tool_of_a_plugin_not_enabled() {
    snapshot("error_tool_not_enabled", &["tools", "call", "snooze"]);
}

#[test]
fn error_bad_args_json() {
    snapshot(
        "error_bad_args_json",
        &["tools", "call", "greet", "--args", "{\"name\": "],
    );
}

#[test]
fn error_bad_config_json() {
    let home = home();
    std::fs::write(
        home.home.path().join("config.json"),
        "{\"plugins\": {\"enabled\": [\"demo\",]}}",
    )
    .unwrap();
    snapshot_in(&home, "error_bad_config_json", &["plugins", "list"]);
}

#[test]
fn error_enable_unknown_plugin() {
    snapshot(
        "error_enable_unknown_plugin",
        &["plugins", "enable", "no-such-plugin"],
    );
}
