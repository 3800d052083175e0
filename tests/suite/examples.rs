//! The example plugins of the plugin author's guides (examples/plugins/),
//! installed and driven through the CLI exactly as the guides show.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn example(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/plugins")
        .join(path)
}

struct Env {
    home: tempfile::TempDir,
    hermes_home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            home: common::home_with(&[]),
            hermes_home: tempfile::tempdir().unwrap(),
            bundled: common::no_bundled(),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_plughost"))
            .args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes_home.path())
            .env_remove("PLUGHOST_LOG")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
            .env_remove("HERMES_ENABLE_PROJECT_PLUGINS")
            .output()
            .unwrap()
    }

    /// stdout of a command that must succeed.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Copy a plugin directory (flat: the examples have no subdirectories).
fn copy_plugin(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

#[test]
fn flowly_hello_does_what_the_quick_start_shows() {
    let env = Env::new();
    let installed = env.ok(&[
        "plugins",
        "install",
        example("flowly/hello").to_str().unwrap(),
        "--enable",
    ]);
    assert!(
        installed.contains("Enabled hello (it loads: 1 tool, 1 hook, 1 command, 1 skill)."),
        "{installed}"
    );
    assert_eq!(
        env.ok(&["tools", "call", "greet", "--args", r#"{"name": "Ada"}"#]),
        "Hello, Ada!\n"
    );
    let blocked = env.run(&["tools", "call", "greet", "--args", r#"{"name": "Mallory"}"#]);
    assert_eq!(text(&blocked.stdout), "[blocked: not Mallory]\n");
    assert_eq!(blocked.status.code(), Some(1));
    assert_eq!(
        env.ok(&["commands", "run", "/hello world"]),
        "hello world\n"
    );
    assert!(env
        .ok(&["skills", "view", "hello:guide"])
        .starts_with("# Greeting"));
}

#[test]
fn flowly_notes_keeps_state_in_its_home_and_guards_and_injects() {
    let env = Env::new();
    env.ok(&[
        "plugins",
        "install",
        example("flowly/notes").to_str().unwrap(),
        "--enable",
    ]);
    assert_eq!(
        env.ok(&[
            "tools",
            "call",
            "add_note",
            "--args",
            r#"{"text": "buy milk"}"#
        ]),
        "Noted (1 notes).\n"
    );
    let stored = std::fs::read_to_string(env.home.path().join("notes/notes.json")).unwrap();
    assert_eq!(stored, r#"[{"text": "buy milk", "tag": "general"}]"#);
    assert_eq!(
        env.ok(&["tools", "call", "list_notes"]),
        "- [general] buy milk\n"
    );
    let blocked = env.run(&[
        "tools",
        "call",
        "add_note",
        "--args",
        r#"{"text": "my password is x"}"#,
    ]);
    assert_eq!(
        text(&blocked.stdout),
        "[blocked: notes must not hold passwords]\n"
    );
    assert_eq!(env.ok(&["commands", "run", "/notes"]), "1 notes.\n");
    assert!(env
        .ok(&["skills", "view", "notes:howto"])
        .starts_with("# Keeping notes"));
    // pre_llm_call: the scripted model echoes the user message it was sent.
    let script = env.home.path().join("echo.yaml");
    std::fs::write(&script, "turns:\n  - say: \"{user_message}\"\n").unwrap();
    let reply = env.ok(&["run", "--script", script.to_str().unwrap(), "hi"]);
    assert!(
        reply.contains("<plugin_context>") && reply.contains("The user keeps 1 notes"),
        "{reply}"
    );
    assert_eq!(env.ok(&["commands", "run", "/notes clear"]), "Cleared.\n");
    assert_eq!(env.ok(&["tools", "call", "list_notes"]), "No notes.\n");
}

#[test]
fn hermes_notes_runs_from_the_hermes_home() {
    let env = Env::new();
    copy_plugin(
        &example("hermes/notes"),
        &env.hermes_home.path().join("plugins/notes"),
    );
    env.ok(&["plugins", "enable", "notes"]);
    assert_eq!(
        env.ok(&[
            "tools",
            "call",
            "add_note",
            "--args",
            r#"{"text": "buy milk"}"#
        ]),
        "{\"ok\": true, \"count\": 1}\n"
    );
    assert!(env.hermes_home.path().join("notes/notes.json").is_file());
    let blocked = env.run(&[
        "tools",
        "call",
        "add_note",
        "--args",
        r#"{"text": "password: x"}"#,
    ]);
    assert_eq!(blocked.status.code(), Some(1));
    assert!(
        text(&blocked.stdout).contains("notes must not hold passwords"),
        "{}",
        text(&blocked.stdout)
    );
    assert_eq!(env.ok(&["commands", "run", "/notes"]), "1 notes.\n");
    assert!(env
        .ok(&["skills", "view", "notes:howto"])
        .starts_with("# Keeping notes"));
    let list = env.ok(&["plugins", "list", "--json"]);
    assert!(list.contains("\"dialect\": \"hermes\""), "{list}");
}

/// A scripted model's script, written into the test's home.
fn script(env: &Env, text: &str) -> String {
    let path = env.home.path().join("script.yaml");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// `run --json` of `message` with the scripted model `script`.
fn run_json(env: &Env, script: &str, message: &str) -> serde_json::Value {
    let out = env.ok(&["run", "--json", "--script", script, message]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn felix_wordcount_tool_guard_mark_and_note() {
    let env = Env::new();
    let installed = env.run(&[
        "plugins",
        "install",
        example("felix/wordcount").to_str().unwrap(),
        "--enable",
    ]);
    assert!(installed.status.success(), "{}", text(&installed.stderr));
    let list: serde_json::Value =
        serde_json::from_str(&env.ok(&["plugins", "list", "--json"])).unwrap();
    let record = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "wordcount")
        .unwrap_or_else(|| panic!("{list:#}"));
    assert_eq!(record["dialect"], "felix", "{record:#}");
    assert_eq!(record["status"], "loaded", "{record:#}");
    // tools call runs before_tool and after_tool too.
    assert_eq!(
        env.ok(&[
            "tools",
            "call",
            "count_words",
            "--args",
            r#"{"text": "one two three"}"#
        ]),
        "3 words (counted by wordcount)\n"
    );
    let blocked = env.run(&[
        "tools",
        "call",
        "count_words",
        "--args",
        r#"{"text": "my password"}"#,
    ]);
    assert_eq!(
        text(&blocked.stdout),
        "[error/blocked] no passwords in tool calls\n"
    );
    assert_eq!(blocked.status.code(), Some(1));
    let script = script(
        &env,
        r#"
turns:
  - say: "Counting."
    tool_calls:
      - name: count_words
        args: {text: "one two three"}
      - name: count_words
        args: {text: "my password is x"}
  - say: "Done."
"#,
    );
    let report = run_json(&env, &script, "count");
    assert_eq!(report["reply"], "Done.", "{report:#}");
    let calls = report["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["result"], "3 words (counted by wordcount)");
    assert_eq!(
        calls[1]["result"],
        "[error/blocked] no passwords in tool calls"
    );
    assert_eq!(calls[1]["outcome"], "blocked");
    let first = report["model_calls"][0]["messages"].to_string();
    assert!(first.contains("Answer in one sentence."), "{first}");
    assert_eq!(report["hook_errors"], serde_json::json!([]));
}

#[test]
fn codumentor_guard_vetoes_patches_and_short_circuits() {
    let env = Env::new();
    let installed = env.run(&[
        "plugins",
        "install",
        example("codumentor/guard").to_str().unwrap(),
        "--enable",
    ]);
    assert!(installed.status.success(), "{}", text(&installed.stderr));
    let list: serde_json::Value =
        serde_json::from_str(&env.ok(&["plugins", "list", "--json"])).unwrap();
    let record = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "guard")
        .unwrap_or_else(|| panic!("{list:#}"));
    assert_eq!(record["dialect"], "codumentor", "{record:#}");
    assert_eq!(record["status"], "loaded", "{record:#}");
    assert_eq!(
        record["hooks"],
        serde_json::json!(["onAfterInput", "onPromptAssemble", "onToolInvokeStart"])
    );
    let script = script(
        &env,
        r#"
turns:
  - say: "Listing."
    tool_calls:
      - name: exec
        args: {command: "ls"}
  - say: "Done."
"#,
    );
    let report = run_json(&env, &script, "list the files");
    assert_eq!(report["reply"], "Done.", "{report:#}");
    let calls = report["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["result"], "[blocked: exec is not allowed here]");
    assert_eq!(calls[0]["outcome"], "blocked");
    let sent = report["model_calls"][0]["messages"].to_string();
    assert!(sent.contains("Be brief."), "{sent}");
    assert_eq!(
        report["ui_events"],
        serde_json::json!([{"type": "tool_vetoed", "data": {"tool": "exec"}}])
    );
    assert_eq!(report["ended_by"], "answer");
    assert_eq!(report["aborted"], serde_json::Value::Null);
    // onAfterInput's short_circuit: no model call at all.
    let ping = run_json(&env, &script, "ping");
    assert_eq!(ping["reply"], "pong", "{ping:#}");
    assert_eq!(ping["ended_by"], "short_circuit");
    assert_eq!(ping["model_calls"], serde_json::json!([]));
    assert_eq!(ping["hook_errors"], serde_json::json!([]));
}
