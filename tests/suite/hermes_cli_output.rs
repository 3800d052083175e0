//! The small things that broke real Hermes plugins (issue 21 item 5): a
//! chatty `register()` no longer breaks `--json` output, `sys.argv` is
//! what plughost was started with, `plughost hermes NAME -h` is the
//! plugin's help, and a plugin's package is not unloaded under a thread
//! still running its code.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded, wait_until, write_plugin};
use serde_json::Value;

/// Prints from `register()`, from a tool and from its CLI command; the
/// command shows `sys.argv` and has an argparse option of its own.
const CHATTY: &str = r#"
import json, sys
print("chatty: loading")

def setup(parser):
    parser.add_argument("--who", default="nobody")

def handle(args):
    print(json.dumps({"argv": sys.argv, "who": args.who}))
    return 3

def shout(args, **kwargs):
    print("chatty: in the tool")
    return json.dumps({"ok": True})

def register(ctx):
    print("chatty: registering")
    ctx.register_tool("shout", "chatty", {"name": "shout", "parameters": {"type": "object", "properties": {}}}, shout)
    ctx.register_cli_command("greet", "Greets", setup, handle)
"#;

struct Env {
    home: tempfile::TempDir,
    hermes: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            home: home_with(&[]),
            hermes: tempfile::tempdir().unwrap(),
            bundled: no_bundled(),
        };
        write_plugin(
            &env.hermes.path().join("plugins"),
            "chatty",
            "name: chatty\n",
            &[("__init__.py", CHATTY)],
        );
        std::fs::write(
            env.hermes.path().join("config.yaml"),
            "plugins:\n  enabled: [chatty]\n",
        )
        .unwrap();
        env
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes.path())
            .env_remove("PLUGHOST_LOG");
        run_bounded(cmd, Duration::from_secs(60))
    }
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn a_chatty_plugin_leaves_json_output_json() {
    if crate::common::in_process_only("a_chatty_plugin_leaves_json_output_json", "it checks where an in-process plugin's print() lands; an isolated plugin's print() goes to stderr by design") {
        return;
    }
    let env = Env::new();
    for args in [
        &["plugins", "list", "--json"][..],
        &["tools", "list", "--json"],
        &["plugins", "doctor", "--json"],
    ] {
        let out = env.run(args);
        assert!(out.status.success(), "{args:?}");
        json_of(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("chatty: registering"), "{args:?}: {err}");
    }
    let script = env.home.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: shout\n        args: {}\n  - say: done\n",
    )
    .unwrap();
    let out = env.run(&[
        "run",
        "go",
        "--json",
        "--model",
        "scripted",
        "--script",
        script.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let turn = json_of(&out);
    assert_eq!(turn["tool_calls"][0]["outcome"], "ok", "{turn:#}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("chatty: in the tool"));
    // Without --json a plugin's print stays on stdout, as before.
    let out = env.run(&["plugins", "list"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("chatty: registering"));
}

#[test]
fn a_plugin_command_gets_argv_its_arguments_and_its_own_help() {
    if crate::common::in_process_only("a_plugin_command_gets_argv_its_arguments_and_its_own_help", "a plugin's print() at import goes to stdout in-process; an isolated plugin's print() goes to stderr by design (docs/isolation.md)") {
        return;
    }
    let env = Env::new();
    let out = env.run(&["hermes", "greet", "--who", "ada"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with('{')).unwrap();
    let seen: Value = serde_json::from_str(line).unwrap();
    assert_eq!(seen["who"], "ada");
    let argv: Vec<&str> = seen["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(&argv[1..], ["hermes", "greet", "--who", "ada"]);
    assert!(Path::new(argv[0]).ends_with("plughost"), "{argv:?}");

    // -h after the command's name is the command's (its argparse help).
    let out = env.run(&["hermes", "greet", "-h"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("usage: plughost hermes greet"), "{help}");
    assert!(help.contains("--who WHO"), "{help}");
    // -h without a name lists the commands.
    let out = env.run(&["hermes", "-h"]);
    assert!(out.status.success());
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("greet  Greets  (chatty)"), "{listed}");
}

/// A Flowly plugin whose background thread imports a submodule once told
/// to (a file appears), writing down what happened.
const THREADED: &str = r#"
import os, threading, time

HERE = os.path.dirname(__file__)

def late_import():
    while not os.path.exists(os.path.join(HERE, "go")):
        time.sleep(0.01)
    try:
        from . import late
        result = "imported " + late.WORD
    except Exception as e:
        result = "lost: " + type(e).__name__
    with open(os.path.join(HERE, "result.tmp"), "w") as f:
        f.write(result)
    os.replace(os.path.join(HERE, "result.tmp"), os.path.join(HERE, "result"))

def register(ctx):
    threading.Thread(target=late_import, daemon=True).start()
"#;

#[test]
fn a_plugin_package_is_not_unloaded_under_its_running_thread() {
    if crate::common::in_process_only(
        "a_plugin_package_is_not_unloaded_under_its_running_thread",
        "it inspects the main process's sys.modules while a plugin thread runs there",
    ) {
        return;
    }
    let home = home_with(&["threaded"]);
    let dir = write_plugin(
        &home.path().join("plugins"),
        "threaded",
        "name: threaded\n",
        &[("__init__.py", THREADED), ("late.py", "WORD = 'late'\n")],
    );
    let bundled = no_bundled();
    let host = crate::common::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    assert!(host.plugins()[0].loaded, "{:?}", host.plugins()[0].error);
    drop(host); // unloads the plugins: not the one whose thread still runs
    std::fs::write(dir.join("go"), "").unwrap();
    let result = dir.join("result");
    wait_until("the thread's import", Duration::from_secs(20), || {
        result.exists()
    });
    assert_eq!(std::fs::read_to_string(&result).unwrap(), "imported late");
}
