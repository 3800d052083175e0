//! A Felix model provider (`register_model_provider(name, factory)`, as
//! Felix's example plugin registers its echo model) is a plughost model:
//! `--model NAME:MODEL` builds its client `factory(model_id, route, spec,
//! settings)` and each call awaits `chat(messages, tools, opts)` with
//! Felix's types; in-process, and in the plugin's worker when isolated
//! (issue 52 item 1).
use crate::common;

use std::process::Command;

const PLUGIN: &str = r#"
import os
from felix_ai.types import ChatMessage, ModelChatResult, TokenUsage


class EchoClient:
    def __init__(self, model_id, route):
        self.model_id = model_id
        self.route = route

    async def chat(self, messages, tools, opts=None):
        last = messages[-1]
        system = any(m.role == "system" and m.content for m in messages)
        text = (f"echo[{self.route.provider}:{self.route.model}] {last.content} "
                f"system={system} tools={len(tools)} pid={os.getpid()}")
        return ModelChatResult(message=ChatMessage(role="assistant", content=text),
                               stop_reason="end_turn", usage=TokenUsage(input=5, output=3))


def build(model_id, route, spec, settings):
    return EchoClient(model_id, route)


def register(registry):
    registry.register_model_provider("example-echo", build)
"#;

fn home() -> tempfile::TempDir {
    let home = common::home_with(&["echo"]);
    common::felix_tree(home.path(), "echo", PLUGIN);
    home
}

/// `plughost run --model MODEL hello` with `isolate`: its pid, status and output.
fn run(home: &std::path::Path, model: &str, isolate: &str) -> (u64, bool, String, String) {
    let bundled = common::no_bundled();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.arg("--home")
        .arg(home)
        .args(["--isolate", isolate, "run", "--model", model, "hello"])
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env_remove("PYTHONPATH")
        .env_remove("PLUGHOST_ISOLATE");
    let (pid, out) = common::run_bounded_pid(cmd, std::time::Duration::from_secs(120));
    (
        pid,
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn answered_from(stdout: &str) -> u64 {
    stdout
        .split("pid=")
        .nth(1)
        .and_then(|p| p.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {stdout}"))
}

#[test]
fn a_felix_model_provider_answers_a_turn_in_process_and_from_its_worker() {
    let home = home();
    let (pid, ok, stdout, stderr) = run(home.path(), "example-echo:echo-1", "none");
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("echo[example-echo:echo-1] hello system=True tools="),
        "{stdout}"
    );
    assert_eq!(answered_from(&stdout), pid, "in-process: plughost's own");

    let (pid, ok, stdout, stderr) = run(home.path(), "example-echo:echo-1", "all");
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("echo[example-echo:echo-1] hello system=True"),
        "{stdout}"
    );
    assert_ne!(answered_from(&stdout), pid, "isolated: the plugin's worker");
    // The profile outlives the plugin's registrations: it must not keep
    // the worker alive until the process dies (reported as a crash).
    assert!(!stderr.contains("crashed"), "{stderr}");
}

#[test]
fn a_felix_model_provider_needs_a_model_name_and_a_failing_client_fails_the_turn_saying_why() {
    let home = home();
    let (_, ok, stdout, stderr) = run(home.path(), "example-echo", "none");
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("name the model: --model example-echo:MODEL"),
        "{stderr}"
    );
    // A client whose chat raises: the turn fails naming the provider and
    // the exception.
    let broken = PLUGIN.replace(
        "        last = messages[-1]",
        "        raise RuntimeError(\"the echo service is down\")",
    );
    let home = common::home_with(&["echo"]);
    common::felix_tree(home.path(), "echo", &broken);
    let (_, ok, stdout, stderr) = run(home.path(), "example-echo:echo-1", "none");
    let all = format!("{stdout}\n{stderr}");
    assert!(
        all.contains("model provider 'example-echo'") && all.contains("the echo service is down"),
        "ok={ok}: {all}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_chat_completions_through_a_felix_model_provider_in_its_worker() {
    let home = home();
    let bundled = common::no_bundled();
    // serve's defaults: the third-party plugin runs isolated.
    let child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home.path())
        .args(["serve", "--port", "0", "--model", "example-echo:echo-1"])
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env_remove("PYTHONPATH")
        .env_remove("PLUGHOST_ISOLATE")
        .env_remove("PLUGHOST_API_KEY")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let server = u64::from(child.id());
    let (status, body) = common::chat_once(child, "hello").await;
    assert_eq!(status, 200, "{body}");
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        text.starts_with("echo[example-echo:echo-1] hello system=True"),
        "{body}"
    );
    assert_ne!(answered_from(text), server, "the client runs in the worker");
}
