//! Hermes's current `PluginContext` (issue 21 item 3): real plugins in
//! Hermes's shape call, in `register()`, the members that used to raise
//! `AttributeError` — teardown (`on_unload`, `spawn_task`, torn down in
//! reverse order when the host stops), settings under
//! `plugins.entries.<id>.settings`, `state`, events between two plugins,
//! the probes and facades — installed with `plugins install` and run
//! through the CLI.
use crate::common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded};
use serde_json::Value;

/// Uses every member; writes what it saw to `seen.json` in the Hermes
/// home, and its teardown order to `teardown.log`.
const USER: &str = r#"
import asyncio, json
from hermes_constants import get_hermes_home

HOME = get_hermes_home()
LOG = HOME / "teardown.log"

def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")

async def ticker():
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        log("task cancelled")
        raise

def register(ctx):
    seen = {}
    ctx.on_unload(lambda: log("first on_unload"))
    seen["task"] = type(ctx.spawn_task(ticker(), name="ticker")).__name__
    ctx.on_unload(lambda: log("second on_unload"))

    seen["greeting_before"] = ctx.get_config("greeting", "none")
    seen["from_yaml"] = ctx.get_config("limits.max", 0)
    ctx.set_config("greeting", "hello")
    ctx.set_config("nested.deep", [1, 2])
    seen["greeting_after"] = ctx.get_config("greeting")
    try:
        ctx.get_config("bad..key")
        seen["bad_key"] = "accepted"
    except ValueError:
        seen["bad_key"] = "refused"

    count = ctx.state.get("loads", 0) + 1
    ctx.state.set("loads", count)
    seen["loads"] = ctx.state["loads"]

    seen["has_emitter"] = ctx.has_plugin("emitter")
    seen["has_nobody"] = ctx.has_plugin("nobody")
    seen["cap_granted"] = ctx.has_capability("network")
    seen["cap_other"] = ctx.has_capability("shell")
    seen["profile"] = ctx.profile_name
    reaction = asyncio.run(ctx.platform_actions.add_reaction("telegram", "chan", "msg", "+1"))
    seen["reaction"] = reaction["error"]
    seen["subagents"] = type(ctx.subagent_lifecycle).__name__
    for name in ("register_context_reference", "register_terminal_environment_provider",
                 "register_secret_source"):
        getattr(ctx, name)(object())

    def on_ping(n):
        log(f"got emitter:ping {n}")
    ctx.subscribe("emitter:ping", on_ping)
    try:
        ctx.emit("hermes:boot")
        seen["reserved_emit"] = "accepted"
    except ValueError:
        seen["reserved_emit"] = "refused"
    (HOME / "seen.json").write_text(json.dumps(seen))
"#;

/// Emits to the user plugin's subscription when its command runs.
const EMITTER: &str = r#"
def register(ctx):
    def ping(raw):
        return f"delivered to {ctx.emit('ping', {'n': 7})}"
    ctx.register_command("ping", ping, description="Ping")
"#;

struct Env {
    home: tempfile::TempDir,
    hermes: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes.path())
            .env_remove("PLUGHOST_LOG");
        run_bounded(cmd, Duration::from_secs(60))
    }

    fn install(&self, name: &str, manifest: &str, init: &str) {
        let src = tempfile::tempdir().unwrap();
        let dir = src.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("plugin.yaml"), manifest).unwrap();
        std::fs::write(dir.join("__init__.py"), init).unwrap();
        let out = self.run(&[
            "plugins",
            "install",
            "--enable",
            "--dialect",
            "hermes",
            dir.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_current_plugin_context_works_the_hermes_way() {
    let env = Env {
        home: home_with(&[]),
        hermes: tempfile::tempdir().unwrap(),
        bundled: no_bundled(),
    };
    std::fs::write(
        env.hermes.path().join("config.yaml"),
        "plugins:\n  entries:\n    user:\n      capabilities: [network]\n      settings:\n        limits: {max: 5}\n",
    )
    .unwrap();
    env.install("emitter", "name: emitter\nversion: 1.0.0\n", EMITTER);
    env.install("user", "name: user\nversion: 1.0.0\n", USER);
    let _ = std::fs::remove_file(env.hermes.path().join("teardown.log"));

    // One command: both plugins load, the emitter's command emits, the host stops.
    let out = env.run(&["commands", "run", "/ping"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "delivered to 1"
    );

    let seen = read_json(&env.hermes.path().join("seen.json"));
    let loads = seen["loads"].as_i64().unwrap();
    assert_eq!(seen["task"], "Future", "{seen:#}");
    assert_eq!(seen["greeting_after"], "hello");
    assert_eq!(
        seen["from_yaml"], 5,
        "operator settings from config.yaml: {seen:#}"
    );
    assert_eq!(seen["bad_key"], "refused");
    assert_eq!(seen["has_emitter"], true, "{seen:#}");
    assert_eq!(seen["has_nobody"], false);
    assert_eq!(seen["cap_granted"], true);
    assert_eq!(seen["cap_other"], false);
    assert_eq!(seen["profile"], "custom");
    assert_eq!(seen["reaction"], "capability_not_granted");
    assert_eq!(seen["subagents"], "SubagentLifecycleService");
    assert_eq!(seen["reserved_emit"], "refused");

    // Settings persisted in plughost's config.json under the plugin's entry.
    let config = read_json(&env.home.path().join("config.json"));
    let settings = &config["plugins"]["entries"]["user"]["settings"];
    assert_eq!(settings["greeting"], "hello", "{config:#}");
    assert_eq!(settings["nested"]["deep"], serde_json::json!([1, 2]));
    assert!(
        config["plugins"]["enabled"].as_array().unwrap().len() >= 2,
        "lists kept: {config:#}"
    );

    // Teardown in reverse acquisition order, after the event was delivered
    // (the subscriber ran on the host's event worker before the host stopped).
    let log = std::fs::read_to_string(env.hermes.path().join("teardown.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        [
            "got emitter:ping 7",
            "second on_unload",
            "task cancelled",
            "first on_unload"
        ],
        "{log}"
    );

    // A second run sees the first one's settings and state.
    let out = env.run(&["plugins", "list", "--json"]);
    assert!(out.status.success());
    let seen = read_json(&env.hermes.path().join("seen.json"));
    assert_eq!(seen["greeting_before"], "hello");
    assert_eq!(
        seen["loads"].as_i64().unwrap(),
        loads + 1,
        "state is durable"
    );
    // The listing's host is torn down like any other (its plugin packages
    // are left in `sys.modules` for the exit, its teardown is not).
    let after = std::fs::read_to_string(env.hermes.path().join("teardown.log")).unwrap();
    assert_eq!(
        after.lines().skip(lines.len()).collect::<Vec<_>>(),
        ["second on_unload", "task cancelled", "first on_unload"],
        "{after}"
    );
}

/// `requires_hermes` is checked against the Hermes API version plughost
/// declares: a plugin needing a newer Hermes fails to load, saying so.
#[test]
fn requires_hermes_gates_loading() {
    let env = Env {
        home: home_with(&["new", "old"]),
        hermes: tempfile::tempdir().unwrap(),
        bundled: no_bundled(),
    };
    let plugins = env.hermes.path().join("plugins");
    common::write_plugin(
        &plugins,
        "new",
        "name: new\nrequires_hermes: '>=99.0'\n",
        &[("__init__.py", "def register(ctx):\n    pass\n")],
    );
    common::write_plugin(
        &plugins,
        "old",
        "name: old\nrequires_hermes: '>=0.9,<1'\n",
        &[("__init__.py", "def register(ctx):\n    pass\n")],
    );
    let out = env.run(&["plugins", "list", "--json"]);
    assert!(out.status.success());
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let find = |k: &str| list.iter().find(|p| p["key"] == k).unwrap().clone();
    let new = find("new");
    assert_eq!(new["status"], "failed", "{new:#}");
    assert!(
        new["error"]
            .as_str()
            .unwrap()
            .contains("requires Hermes >=99.0; plughost provides the Hermes 0.19.0 plugin API"),
        "{new:#}"
    );
    assert_eq!(find("old")["status"], "loaded");
}

/// With every plugin isolated, plughost's own interpreter starts on the
/// thread that first needs it, not the main one: the CLI still takes
/// Ctrl-C over from Python there, without a warning.
#[test]
fn with_every_plugin_isolated_the_cli_still_takes_ctrl_c_over() {
    let env = Env {
        home: home_with(&["old"]),
        hermes: tempfile::tempdir().unwrap(),
        bundled: no_bundled(),
    };
    common::write_plugin(
        &env.hermes.path().join("plugins"),
        "old",
        "name: old\nrequires_hermes: '>=0.9,<1'\n",
        &[("__init__.py", "def register(ctx):\n    pass\n")],
    );
    let out = env.run(&["--isolate", "all", "plugins", "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("could not take Ctrl-C over"), "{err}");
}
