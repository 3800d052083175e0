//! Transcripts that survive the unlucky: a crash mid-call, a torn last
//! line, two processes on one session, a new process delegating again, a
//! cancelled turn's end-of-session hook. Part of the reliability suite: each
//! case runs under a wall-clock bound, so a hang fails instead of stalling CI.

use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{no_bundled, write_plugin};
use plughost::agent::provider::openai::OpenAi;
use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::provider::Provider;
use plughost::agent::session::{interrupted_result, SessionStore};
use plughost::agent::tools::{self, DelegateSlot, ToolLimits, Workspace};
use plughost::agent::{Agent, AgentConfig, Inbound, TurnReport};
use plughost::Host;
use serde_json::{json, Value};

/// Every case's wall-clock bound.
const BOUND: Duration = Duration::from_secs(30);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Run `fut` on `rt`, failing the test if it takes longer than [`BOUND`].
fn bounded<T>(rt: &tokio::runtime::Runtime, fut: impl Future<Output = T>) -> T {
    rt.block_on(async {
        tokio::time::timeout(BOUND, fut)
            .await
            .expect("the case finished within its wall-clock bound")
    })
}

/// A host over `home` with the built-in tools (and `delegate`), the
/// plugins under `home/plugins` that `home/config.json` enables, and no
/// bundled plugins.
fn agent(
    home: &Path,
    provider: Arc<dyn Provider>,
    config: AgentConfig,
    rt: &tokio::runtime::Runtime,
) -> Agent {
    let bundled = no_bundled();
    let workspace = Workspace::new(&home.join("workspace")).unwrap();
    let slot = DelegateSlot::default();
    let mut builder = Host::builder()
        .home(home)
        .bundled_dir(bundled.path())
        .hook_timeout(Duration::from_secs(5));
    for t in tools::builtin_tools(&workspace, &ToolLimits::default()) {
        builder = builder.tool(t);
    }
    let host = builder.tool(tools::delegate_tool(&slot)).build().unwrap();
    let _g = rt.enter();
    Agent::new(Arc::new(host), provider, config, Some(&slot))
}

fn scripted(script: &str) -> Arc<dyn Provider> {
    Arc::new(Scripted::new(Script::parse(script, "test.yaml").unwrap()))
}

fn lines_of(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line of a transcript is whole JSON"))
        .collect()
}

/// What an OpenAI-compatible API checks before it answers 400: each
/// assistant message's tool calls answered, by tool messages right after
/// it, and no tool message that answers nothing.
fn api_shape_problem(messages: &[Value]) -> Option<String> {
    let mut open: Vec<String> = Vec::new();
    for m in messages {
        match m["role"].as_str() {
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or_default().to_string();
                let Some(at) = open.iter().position(|o| *o == id) else {
                    return Some(format!("tool message {id} answers no open tool call"));
                };
                open.remove(at);
            }
            _ => {
                if !open.is_empty() {
                    return Some(format!(
                        "an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'; missing {open:?}"
                    ));
                }
                if let Some(calls) = m["tool_calls"].as_array() {
                    open = calls
                        .iter()
                        .map(|c| c["id"].as_str().unwrap_or_default().to_string())
                        .collect();
                }
            }
        }
    }
    (!open.is_empty()).then(|| format!("unanswered tool calls at the end: {open:?}"))
}

/// A loopback OpenAI-compatible server that judges each request's shape as
/// the real API does (400 on a bad one) and otherwise streams `reply`.
struct Stub {
    url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

fn strict_stub(reply: &'static str, connections: usize) -> Stub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    std::thread::spawn(move || {
        for _ in 0..connections {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let problem = api_shape_problem(request["messages"].as_array().unwrap_or(&Vec::new()));
            seen.lock().unwrap().push(request);
            let response = match problem {
                Some(message) => {
                    let body = json!({"error": {"message": message}}).to_string();
                    format!(
                        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                }
                None => {
                    let chunk = json!({"choices": [{"index": 0, "delta": {"content": reply}, "finish_reason": null}]});
                    let end =
                        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: {chunk}\n\ndata: {end}\n\ndata: [DONE]\n\n"
                    )
                }
            };
            stream.write_all(response.as_bytes()).unwrap();
            let _ = stream.flush();
        }
    });
    Stub { url, requests }
}

fn write_transcript(path: &Path, messages: &[Value], tail: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut text: String = messages.iter().map(|m| format!("{m}\n")).collect();
    text.push_str(tail);
    std::fs::write(path, text).unwrap();
}

fn side_files(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".aside-"))
        .collect();
    found.sort();
    found
}

#[test]
fn a_transcript_ending_in_an_unanswered_tool_call_resumes_with_a_valid_request() {
    let home = tempfile::tempdir().unwrap();
    let store = SessionStore::new(home.path().join("sessions"));
    let path = store.path_of("crashed");
    // What `kill -9` during an `exec` call leaves: the call, no result. And
    // before it, a call answered by a tool message that strayed past the
    // next user message (two processes interleaving before turn locks).
    let call = |id: &str, name: &str| json!({"role": "assistant", "content": "", "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}}]});
    write_transcript(
        &path,
        &[
            json!({"role": "user", "content": "list it"}),
            call("call_1", "list_dir"),
            json!({"role": "user", "content": "from the other process"}),
            json!({"role": "tool", "tool_call_id": "call_1", "name": "list_dir", "content": "(empty)"}),
            json!({"role": "assistant", "content": "It is empty."}),
            json!({"role": "user", "content": "now run it"}),
            call("call_2", "exec"),
        ],
        "",
    );

    let stub = strict_stub("Resumed fine.", 2);
    let mut provider = OpenAi::from_env("test-model", Some(stub.url.clone())).unwrap();
    provider.backoff = Duration::from_millis(10);
    let rt = rt();
    let agent = agent(home.path(), Arc::new(provider), AgentConfig::default(), &rt);
    let report = bounded(
        &rt,
        agent.send(Inbound::new("crashed", "what happened?"), None),
    );
    assert!(report.completed, "{:?}", report.error);
    assert_eq!(report.reply.as_deref(), Some("Resumed fine."));

    let requests = stub.requests.lock().unwrap();
    assert_eq!(requests.len(), 1, "accepted the first time: no 400");
    let sent = requests[0]["messages"].as_array().unwrap();
    assert_eq!(api_shape_problem(sent), None);
    let answer = sent
        .iter()
        .find(|m| m["tool_call_id"] == "call_2")
        .expect("the unanswered call has a result");
    assert_eq!(answer["content"], interrupted_result("exec"));
    assert_eq!(
        answer["content"],
        "Error executing exec: interrupted (plughost stopped before the call finished)"
    );
    let order: Vec<&str> = sent.iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(
        order[1..],
        [
            "list it",
            "",
            "(empty)",
            "from the other process",
            "It is empty.",
            "now run it",
            "",
            answer["content"].as_str().unwrap(),
            "what happened?"
        ],
        "the strayed result moved back after its call, nothing else reordered"
    );
    assert!(side_files(path.parent().unwrap()).is_empty());
    let on_disk = lines_of(&path);
    assert_eq!(
        api_shape_problem(&on_disk),
        None,
        "the repair is on disk too"
    );
    assert_eq!(on_disk.len(), 10);
}

#[test]
fn a_torn_last_line_is_set_aside_and_every_later_message_survives_reloads() {
    let home = tempfile::tempdir().unwrap();
    let store = SessionStore::new(home.path().join("sessions"));
    let path = store.path_of("torn");
    let torn = r#"{"content":"half a mess"#;
    write_transcript(
        &path,
        &[
            json!({"role": "user", "content": "first"}),
            json!({"role": "assistant", "content": "one"}),
        ],
        torn,
    );
    let rt = rt();
    let script = "turns:\n  - say: \"echo {user_message}\"\n";
    for (round, text) in ["second", "third", "fourth"].iter().enumerate() {
        // A new agent each round: a reload from disk, as a restart does.
        let agent = agent(home.path(), scripted(script), AgentConfig::default(), &rt);
        let report = bounded(&rt, agent.send(Inbound::new("torn", text), None));
        assert!(report.completed, "round {round}: {:?}", report.error);
        let contents: Vec<String> = lines_of(&path)
            .iter()
            .map(|m| m["content"].as_str().unwrap().to_string())
            .collect();
        let mut expected = vec!["first".to_string(), "one".to_string()];
        for earlier in &["second", "third", "fourth"][..=round] {
            expected.push(earlier.to_string());
            expected.push(format!("echo {earlier}"));
        }
        assert_eq!(contents, expected, "round {round}");
    }
    let aside = side_files(path.parent().unwrap());
    assert_eq!(aside.len(), 1, "set aside once: {aside:?}");
    assert_eq!(
        std::fs::read_to_string(&aside[0]).unwrap(),
        format!("{torn}\n"),
        "the torn bytes are kept as they were"
    );

    // A later tear gets its own side file; the first is never overwritten.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(b"\xff\xfe not even text").unwrap();
    drop(file);
    let agent = agent(home.path(), scripted(script), AgentConfig::default(), &rt);
    assert!(bounded(&rt, agent.send(Inbound::new("torn", "fifth"), None)).completed);
    let aside = side_files(path.parent().unwrap());
    assert_eq!(aside.len(), 2, "{aside:?}");
    assert_eq!(
        std::fs::read(&aside[0]).unwrap(),
        format!("{torn}\n").into_bytes()
    );
    assert!(aside
        .iter()
        .any(|p| std::fs::read(p).unwrap() == b"\xff\xfe not even text\n"));
    assert_eq!(lines_of(&path).len(), 10);
}

#[test]
fn a_second_agent_on_a_busy_session_waits_then_is_refused_clearly() {
    let home = tempfile::tempdir().unwrap();
    let rt = rt();
    let slow = "turns:\n  - tool_calls:\n      - name: exec\n        args: {command: \"sleep 1.5\"}\n  - say: \"slept\"\n";
    // Two agents, two session stores: what two processes on one home have.
    let first = agent(home.path(), scripted(slow), AgentConfig::default(), &rt);
    let impatient = agent(
        home.path(),
        scripted("turns:\n  - say: \"never\"\n"),
        AgentConfig {
            session_wait: Duration::from_millis(300),
            ..AgentConfig::default()
        },
        &rt,
    );
    let patient = agent(
        home.path(),
        scripted("turns:\n  - say: \"after you\"\n"),
        AgentConfig::default(),
        &rt,
    );
    let lock_file = first
        .sessions()
        .path_of("shared")
        .with_extension("jsonl.lock");
    let (first_report, refused, waited): (TurnReport, TurnReport, (TurnReport, Instant)) =
        bounded(&rt, async {
            let running = tokio::spawn({
                let first = first.clone();
                async move { first.send(Inbound::new("shared", "sleep"), None).await }
            });
            // The first turn holds the lock once its pid is in the lock file.
            while std::fs::read_to_string(&lock_file)
                .map(|t| t.trim().is_empty())
                .unwrap_or(true)
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let refused = impatient.send(Inbound::new("shared", "me too"), None).await;
            let patient = tokio::spawn({
                let patient = patient.clone();
                async move {
                    let report = patient.send(Inbound::new("shared", "me next"), None).await;
                    (report, Instant::now())
                }
            });
            let first_report = running.await.unwrap();
            (first_report, refused, patient.await.unwrap())
        });
    assert!(first_report.completed, "{:?}", first_report.error);
    assert!(!refused.completed);
    let message = refused.error.unwrap();
    assert_eq!(
        message,
        format!(
            "session 'shared' is in use by another plughost process (pid {}): its turn did not end within 0.3 s. Try again when it has finished, or use another session (--session NAME)",
            std::process::id()
        )
    );
    let (waited, _) = waited;
    assert!(waited.completed, "{:?}", waited.error);
    assert_eq!(waited.reply.as_deref(), Some("after you"));
    assert_eq!(
        turns_of(&first.sessions().path_of("shared")),
        [
            "user:sleep",
            "assistant:",
            "tool",
            "assistant:slept",
            "user:me next",
            "assistant:after you"
        ],
        "one turn after the other, never interleaved; the refused one left nothing"
    );
}

/// `role:content` of each message of a transcript.
fn turns_of(path: &Path) -> Vec<String> {
    lines_of(path)
        .iter()
        .map(|m| match m["role"].as_str().unwrap() {
            "tool" => "tool".to_string(),
            role => format!("{role}:{}", m["content"].as_str().unwrap_or("")),
        })
        .collect()
}

#[test]
fn two_cli_processes_on_one_session_take_turns() {
    let home = tempfile::tempdir().unwrap();
    let bundled = no_bundled();
    let script = home.path().join("slow.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: exec\n        args: {command: \"sleep 1\"}\n  - say: \"done {user_message}\"\n",
    )
    .unwrap();
    let spawn = |message: &str| {
        Command::new(env!("CARGO_BIN_EXE_plughost"))
            .args([
                "run",
                "--script",
                script.to_str().unwrap(),
                "--session",
                "same",
                message,
            ])
            .env("PLUGHOST_HOME", home.path())
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .env_remove("PLUGHOST_LOG")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let transcript = home.path().join("sessions/same.jsonl");
    let started = Instant::now();
    let first = spawn("one");
    // Start the second once the first is inside its tool call.
    while !std::fs::read_to_string(&transcript).is_ok_and(|t| t.contains("tool_calls")) {
        assert!(
            started.elapsed() < BOUND,
            "the first process never called its tool"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = spawn("two");
    let wait = |child: std::process::Child| {
        let (tx, rx) = std::sync::mpsc::channel();
        let pid = child.id();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        rx.recv_timeout(BOUND)
            .unwrap_or_else(|_| panic!("process {pid} hung"))
            .unwrap()
    };
    let (first, second) = (wait(first), wait(second));
    for out in [&first, &second] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        turns_of(&transcript),
        [
            "user:one",
            "assistant:",
            "tool",
            "assistant:done one",
            "user:two",
            "assistant:",
            "tool",
            "assistant:done two"
        ],
        "one turn after the other, never interleaved"
    );
}

#[test]
fn every_delegate_call_gets_a_fresh_sub_agent_even_in_a_new_process() {
    let home = tempfile::tempdir().unwrap();
    let rt = rt();
    let script = r#"
turns:
  - tool_calls:
      - name: delegate
        args: {task: "count the turns", tools: ["list_dir"]}
  - say: "done"
"#;
    for process in 0..2 {
        // A new agent (its own session store and counter): a new process.
        let agent = agent(home.path(), scripted(script), AgentConfig::default(), &rt);
        let report = bounded(
            &rt,
            agent.send(Inbound::new("parent", &format!("go {process}")), None),
        );
        assert!(report.completed, "{:?}", report.error);
    }
    let store = SessionStore::new(home.path().join("sessions"));
    for n in 1..=2 {
        let sub = lines_of(&store.path_of(&format!("parent/sub-{n}")));
        let users: Vec<&Value> = sub.iter().filter(|m| m["role"] == "user").collect();
        assert_eq!(
            users.len(),
            1,
            "sub-agent {n} saw only its own task, no earlier conversation: {sub:?}"
        );
        assert_eq!(users[0]["content"], "count the turns");
    }
    assert!(!store.path_of("parent/sub-3").exists());
}

/// A plugin whose `on_session_end` takes a while: it notes that it began,
/// sleeps, then notes how the turn ended. Its `nap` tool notes that it began.
const END_HOOK: &str = r#"
import asyncio, pathlib
MARKERS = pathlib.Path(__file__).parent / "markers"

def note(name, text):
    with open(MARKERS / name, "a") as f:
        f.write(text + "\n")

def register(ctx):
    MARKERS.mkdir(exist_ok=True)
    async def ended(c):
        note("end-began", "")
        await asyncio.sleep(0.4)
        note("ended", f"{c.completed}/{c.interrupted}")
    ctx.register_hook("on_session_end", ended)
    async def nap(seconds: float = 0.3):
        note("nap-began", "")
        await asyncio.sleep(seconds)
        return f"napped {seconds}"
    ctx.register_tool("nap", {"type": "object", "properties": {"seconds": {"type": "number"}}}, nap)
"#;

/// Completes once the plugin has written marker `name`.
async fn marked(markers: PathBuf, name: &'static str) {
    while !markers.join(name).exists() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn a_cancel_never_cuts_short_the_end_of_session_hook() {
    let home = tempfile::tempdir().unwrap();
    let plugin = write_plugin(
        &home.path().join("plugins"),
        "ender",
        "name: ender\n",
        &[("__init__.py", END_HOOK)],
    );
    std::fs::write(
        home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["ender"]}}"#,
    )
    .unwrap();
    let markers = plugin.join("markers");
    let ended = markers.join("ended");
    let rt = rt();
    let script = "turns:\n  - tool_calls:\n      - name: nap\n        args: {seconds: 10}\n  - say: \"quick\"\n  - say: \"after the cancel\"\n";
    let agent = agent(home.path(), scripted(script), AgentConfig::default(), &rt);

    // Cancelled mid-tool: on_session_end(False, True) runs to its end.
    let report = bounded(
        &rt,
        agent.send_cancellable(
            Inbound::new("c", "nap long"),
            None,
            marked(markers.clone(), "nap-began"),
        ),
    );
    assert!(report.interrupted);
    assert_eq!(
        std::fs::read_to_string(&ended).unwrap(),
        "False/True\n",
        "the hook finished before the cancelled turn returned"
    );
    let transcript = lines_of(&agent.sessions().path_of("c"));
    let last = transcript.last().unwrap();
    assert_eq!(last["role"], "tool");
    assert_eq!(
        last["content"],
        "Error executing nap: the call was cancelled"
    );

    // Cancelled while a finished turn's hook runs: the hook is not cut
    // short, and the turn is neither reported as cancelled nor ended twice.
    std::fs::remove_file(&ended).unwrap();
    std::fs::remove_file(markers.join("end-began")).unwrap();
    let report = bounded(
        &rt,
        agent.send_cancellable(
            Inbound::new("c", "quick one"),
            None,
            marked(markers.clone(), "end-began"),
        ),
    );
    assert!(report.completed && !report.interrupted, "{report:?}");
    assert_eq!(report.reply.as_deref(), Some("quick"));
    assert_eq!(std::fs::read_to_string(&ended).unwrap(), "True/False\n");
    let report = bounded(&rt, agent.send(Inbound::new("c", "and on"), None));
    assert!(report.completed, "{:?}", report.error);
    assert_eq!(report.reply.as_deref(), Some("after the cancel"));
}
