//! The last members of Hermes's `PluginContext` that plughost used to
//! accept and never use (issue 21 item 3), and `pre_command`: plugins in
//! Hermes's shape, installed with `plugins install`, run through the CLI
//! and an agent turn with the scripted model.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{home_with, no_bundled, run_bounded};
use serde_json::Value;

struct Env {
    home: tempfile::TempDir,
    hermes: tempfile::TempDir,
    bundled: tempfile::TempDir,
    ws: PathBuf,
}

impl Env {
    fn new() -> Env {
        let home = home_with(&[]);
        let ws = home.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        Env {
            home,
            hermes: tempfile::tempdir().unwrap(),
            bundled: no_bundled(),
            ws,
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes.path())
            .env_remove("PLUGHOST_LOG");
        run_bounded(cmd, Duration::from_secs(90))
    }

    /// `plugins install --enable` a plugin directory (no `--dialect`: it
    /// must be detected as Hermes's).
    fn install(&self, name: &str, init: &str) {
        let src = tempfile::tempdir().unwrap();
        let dir = src.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("plugin.yaml"),
            format!("name: {name}\nversion: 1.0.0\n"),
        )
        .unwrap();
        std::fs::write(dir.join("__init__.py"), init).unwrap();
        let out = self.run(&["plugins", "install", "--enable", dir.to_str().unwrap()]);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(said.contains("Loads as a hermes plugin"), "{said}");
    }

    /// `run INPUT --json` with the scripted model answering `script`.
    fn turn(&self, input: &str, script: &str) -> Value {
        let path = self.home.path().join("script.yaml");
        std::fs::write(&path, script).unwrap();
        let out = self.run(&[
            "run",
            input,
            "--json",
            "--model",
            "scripted",
            "--script",
            path.to_str().unwrap(),
            "--workspace",
            self.ws.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
    }
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const SAY_DONE: &str = "turns:\n  - say: \"done\"\n";

/// Writes down every `pre_command` it hears, and answers a directive
/// (Hermes v1 ignores it: the command still runs).
const PRE_COMMAND: &str = r#"
import json
from hermes_constants import get_hermes_home

def heard(**kwargs):
    kwargs.pop("telemetry_schema_version", None)
    with open(get_hermes_home() / "commands.jsonl", "a") as f:
        f.write(json.dumps(kwargs, sort_keys=True) + "\n")
    return {"action": "block", "message": "ignored in v1"}

def register(ctx):
    ctx.register_hook("pre_command", heard)
    ctx.register_command("greet", lambda raw: f"hello {raw}", description="Greet")
"#;

#[test]
fn pre_command_fires_before_a_recognised_command_with_hermes_keywords() {
    let env = Env::new();
    env.install("cmdwatch", PRE_COMMAND);
    let greet = env.turn("/greet  big world", SAY_DONE);
    assert_eq!(greet["reply"], "hello big world", "{greet:#}");
    let clear = env.turn("/clear", SAY_DONE);
    assert_eq!(clear["reply"], "Started a new session.", "{clear:#}");
    // Not recognised: no pre_command.
    let unknown = env.turn("/nosuch thing", SAY_DONE);
    assert!(unknown["reply"]
        .as_str()
        .unwrap()
        .contains("Unknown command"));
    let heard = lines(&env.hermes.path().join("commands.jsonl"));
    assert_eq!(heard.len(), 2, "{heard:#?}");
    assert_eq!(heard[0]["command"], "greet");
    assert_eq!(heard[0]["alias_used"], Value::Null);
    assert_eq!(heard[0]["args_raw"], "big world");
    assert_eq!(heard[0]["surface"], "cli");
    assert_eq!(heard[0]["platform"], "cli");
    assert!(heard[0]["session_key"]
        .as_str()
        .is_some_and(|k| !k.is_empty()));
    assert_eq!(heard[1]["command"], "new");
    assert_eq!(heard[1]["alias_used"], "clear");
    assert_eq!(heard[1]["args_raw"], "");
}
