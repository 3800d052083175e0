//! Reliability suite for the OpenAI provider and the agent flags: each
//! hostile case against a loopback stub server (or the CLI as a
//! subprocess), each with a wall-clock bound so a hang fails the test
//! instead of hanging CI.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::alloc_count::peak_during;
use crate::common::{no_bundled, write_plugin};
use plughost::agent::provider::openai::OpenAi;
use plughost::agent::provider::{ChatRequest, ChatResponse, Provider, ProviderError};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::Host;
use serde_json::{json, Value};

/// The bound on every case: far above what a passing case takes.
const BOUND: Duration = Duration::from_secs(30);

/// What the stub does with one connection, after reading the request.
#[derive(Clone)]
enum Reply {
    /// Send these bytes, then close.
    Send(String),
    /// Send these bytes (maybe none), then nothing, holding the connection open.
    Stall(String),
    /// Send `head`, then `unit` again and again until the client hangs up.
    Endless { head: String, unit: String },
}

/// A loopback server answering the n-th connection with the n-th reply
/// (later ones are closed at once), counting connections.
struct Stub {
    url: String,
    connections: Arc<AtomicUsize>,
}

fn serve(replies: Vec<Reply>) -> Stub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = connections.clone();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            seen.fetch_add(1, Ordering::SeqCst);
            let reply = replies.get(n).cloned();
            std::thread::spawn(move || answer(stream, reply));
        }
    });
    Stub { url, connections }
}

fn answer(mut stream: TcpStream, reply: Option<Reply>) {
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
    let _ = reader.read_exact(&mut body);
    match reply {
        None => {}
        Some(Reply::Send(bytes)) => {
            let _ = stream.write_all(bytes.as_bytes());
        }
        Some(Reply::Stall(bytes)) => {
            let _ = stream.write_all(bytes.as_bytes());
            let _ = stream.flush();
            std::thread::sleep(BOUND + Duration::from_secs(5));
        }
        Some(Reply::Endless { head, unit }) => {
            let unit = unit.repeat((16 << 10) / unit.len().max(1) + 1);
            let mut sent = stream.write_all(head.as_bytes());
            while sent.is_ok() {
                sent = stream.write_all(unit.as_bytes());
            }
        }
    }
}

const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";

fn event(value: Value) -> String {
    format!("data: {value}\n\n")
}

fn text_event(text: &str) -> String {
    event(json!({"choices": [{"index": 0, "delta": {"content": text}}]}))
}

fn sse(body: &str) -> String {
    format!("{SSE_HEAD}{body}")
}

/// A stream whose tool call is cut off mid-arguments, before any
/// `finish_reason` or `[DONE]`.
fn cut_tool_call(marker: &str) -> String {
    let call = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
        "function": {"name": "touch", "arguments": format!("{{\"path\": \"{marker}")}}]}}]});
    sse(&format!("{}{}", text_event("Let me "), event(call)))
}

fn provider(url: &str, timeout: Duration) -> OpenAi {
    let mut p = OpenAi::from_env("test-model", Some(url.to_string())).unwrap();
    p.backoff = Duration::from_millis(10);
    p.set_timeout(timeout).unwrap();
    p
}

/// One model call on a runtime of this thread (so its allocations are this
/// thread's), failing the test if it takes longer than [`BOUND`].
fn complete(p: &OpenAi) -> (Result<ChatResponse, ProviderError>, Duration) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let result = rt
        .block_on(async {
            tokio::time::timeout(BOUND, p.complete(ChatRequest::default(), None)).await
        })
        .expect("the model call must end within the bound");
    (result, started.elapsed())
}

#[test]
fn a_stalled_server_fails_within_the_model_timeout_and_is_not_retried() {
    let s = serve(vec![Reply::Stall(String::new())]);
    let (result, _) = complete(&provider(&s.url, Duration::from_millis(500)));
    let err = result.unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("for 0.5 s") && message.contains("--model-timeout"),
        "{message}"
    );
    // The server stalls past BOUND, so the Timeout error (not the BOUND
    // guard in `complete`) proves the model timeout ended the call.
    assert_eq!(s.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn a_stream_that_stalls_midway_fails_within_the_model_timeout() {
    let s = serve(vec![Reply::Stall(sse(&text_event("Hello")))]);
    let (result, _) = complete(&provider(&s.url, Duration::from_millis(500)));
    assert!(
        matches!(result, Err(ProviderError::Timeout { .. })),
        "{result:?}"
    );
    // As above: the Timeout error, before the server's stall ends, is the proof.
}

#[test]
fn an_endless_stream_ends_at_the_size_cap_with_bounded_memory() {
    let s = serve(vec![Reply::Endless {
        head: SSE_HEAD.into(),
        unit: text_event(&"and on ".repeat(500)),
    }]);
    let p = provider(&s.url, Duration::from_secs(10));
    let mut outcome = None;
    let peak = peak_during(|| outcome = Some(complete(&p)));
    let (result, _) = outcome.unwrap();
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("passed 16777216 bytes") && message.contains("check the server"),
        "{message}"
    );
    // The text kept (under 16 MiB, grown by doubling) and buffers: never the stream.
    assert!(peak < 48 << 20, "held {} MiB", peak >> 20);
}

#[test]
fn an_endless_line_ends_at_the_line_cap() {
    let s = serve(vec![Reply::Endless {
        head: format!("{SSE_HEAD}data: {{\"choices\": [{{\"delta\": {{\"content\": \""),
        unit: "x".into(),
    }]);
    let (result, _) = complete(&provider(&s.url, Duration::from_secs(10)));
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("one line of the stream passed 1048576 bytes"),
        "{message}"
    );
}

#[test]
fn a_huge_tool_call_index_is_a_clear_error_not_an_abort() {
    for index in [json!(u64::MAX), json!(1u64 << 40), json!(128)] {
        let fragment = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, "id": "x",
            "function": {"name": "exec", "arguments": "{}"}}]}}]});
        let s = serve(
            vec![sse(&format!("{}data: [DONE]\n\n", event(fragment)))]
                .into_iter()
                .map(Reply::Send)
                .collect(),
        );
        let (result, _) = complete(&provider(&s.url, Duration::from_secs(10)));
        let message = result.unwrap_err().to_string();
        assert!(
            message.contains(&format!("a tool call with index {index}"))
                && message.contains("at most 128 tool calls"),
            "{message}"
        );
        assert_eq!(s.connections.load(Ordering::SeqCst), 1, "not retried");
    }
}

#[test]
fn a_stream_cut_before_its_end_is_retried_then_a_clear_error() {
    let s = serve(vec![Reply::Send(cut_tool_call("x")); 4]);
    let (result, _) = complete(&provider(&s.url, Duration::from_secs(10)));
    let err = result.unwrap_err();
    assert!(
        matches!(err, ProviderError::Incomplete { attempts: 4, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("broke off before it was complete (the answer ended before it was complete (no finish_reason and no [DONE])) on all 4 attempts; nothing of it was used"),
        "{err}"
    );
    assert_eq!(s.connections.load(Ordering::SeqCst), 4);
}

#[test]
fn a_body_shorter_than_its_length_is_retried_like_a_dropped_connection() {
    let partial = text_event("Hel");
    let short = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 10000\r\nConnection: close\r\n\r\n{partial}"
    );
    let whole = sse(&format!(
        "{}{}data: [DONE]\n\n",
        text_event("Hello"),
        event(json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}))
    ));
    let s = serve(vec![Reply::Send(short), Reply::Send(whole)]);
    let (result, _) = complete(&provider(&s.url, Duration::from_secs(10)));
    assert_eq!(result.unwrap().text, "Hello");
    assert_eq!(s.connections.load(Ordering::SeqCst), 2);
}

#[test]
fn plain_json_answers_cut_short_or_without_choices_are_errors() {
    let json_reply = |body: &str| {
        Reply::Send(format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{body}"
        ))
    };
    let cut = json_reply(r#"{"choices": [{"message": {"content": "hal"#);
    let s = serve(vec![cut.clone(), cut.clone(), cut.clone(), cut]);
    let (result, _) = complete(&provider(&s.url, Duration::from_secs(10)));
    assert!(
        matches!(result, Err(ProviderError::Incomplete { attempts: 4, .. })),
        "{result:?}"
    );
    let s = serve(vec![json_reply(r#"{"id": "x"}"#)]);
    let (result, _) = complete(&provider(&s.url, Duration::from_secs(10)));
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("bad completion: it has no choices"),
        "{message}"
    );
}

#[test]
fn odd_retry_after_values_and_endless_error_bodies_are_handled() {
    let status = |code: &str, extra: &str| {
        Reply::Send(format!(
            "HTTP/1.1 {code}\r\nContent-Type: application/json\r\n{extra}Connection: close\r\n\r\n{{\"error\": {{\"message\": \"busy\"}}}}"
        ))
    };
    let ok = Reply::Send(sse(&format!("{}data: [DONE]\n\n", text_event("fine"))));
    // A negative Retry-After once panicked (Duration::from_secs_f64(-1)).
    let s = serve(vec![
        status("429 Too Many Requests", "Retry-After: -1\r\n"),
        status("503 Service Unavailable", "Retry-After: NaN\r\n"),
        Reply::Endless {
            head: "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\n".into(),
            unit: "oops ".into(),
        },
        ok,
    ]);
    let (result, took) = complete(&provider(&s.url, Duration::from_secs(10)));
    assert_eq!(result.unwrap().text, "fine");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn a_cut_tool_call_is_never_dispatched_in_a_turn() {
    let home = tempfile::tempdir().unwrap();
    let marker = home.path().join("touched");
    write_plugin(
        &home.path().join("plugins"),
        "toucher",
        "name: toucher\n",
        &[(
            "__init__.py",
            "def register(ctx):\n    ctx.register_tool('touch', {'type': 'object', 'properties': {'path': {'type': 'string'}}}, lambda path='': open(path, 'w').write('ran') and 'ok')\n",
        )],
    );
    let marker_text = marker.to_str().unwrap();
    let s = serve(vec![Reply::Send(cut_tool_call(marker_text)); 4]);
    let bundled = no_bundled();
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .enable(["toucher"])
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let p = provider(&s.url, Duration::from_secs(10));
    let agent = Agent::new(Arc::new(host), Arc::new(p), AgentConfig::default(), None);
    let report = rt
        .block_on(async {
            tokio::time::timeout(BOUND, agent.send(Inbound::new("cut", "touch it"), None)).await
        })
        .expect("the turn must end within the bound");
    assert!(!report.completed);
    assert!(report.tool_calls.is_empty(), "{:?}", report.tool_calls);
    assert!(!marker.exists(), "the cut tool call ran");
    let reply = report.reply.unwrap();
    assert!(
        reply.starts_with("Error: model call failed: the model API's answer broke off"),
        "{reply}"
    );
}

/// The CLI on the given arguments, killed (and the test failed) past the bound.
fn plughost(args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    let bundled = no_bundled();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(args)
        .env("PLUGHOST_HOME", home.path())
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env_remove("PLUGHOST_LOG")
        .env_remove("OPENAI_BASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > BOUND {
            let _ = child.kill();
            panic!("plughost {args:?} did not end within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn numeric_flags_out_of_range_exit_2_with_a_message() {
    let seconds = "must be a number of seconds above 0 and at most 604800 (a week)";
    let cases: Vec<(&str, &str, &str)> = vec![
        ("--tool-timeout", "1e20", seconds),
        ("--tool-timeout", "nan", seconds),
        ("--tool-timeout", "-1", seconds),
        ("--tool-timeout", "0", seconds),
        ("--tool-timeout", "inf", seconds),
        ("--tool-timeout", "ten", "not a number of seconds"),
        ("--hook-timeout", "1e20", seconds),
        ("--hook-timeout", "-0.5", seconds),
        ("--model-timeout", "1e400", seconds),
        ("--model-timeout", "0", seconds),
        (
            "--max-iterations",
            "0",
            "must be a whole number from 1 to 10000",
        ),
        (
            "--max-iterations",
            "-1",
            "must be a whole number from 1 to 10000",
        ),
        (
            "--max-iterations",
            "99999999999999999999",
            "must be a whole number from 1 to 10000",
        ),
        (
            "--max-iterations",
            "2.5",
            "must be a whole number from 1 to 10000",
        ),
    ];
    for command in ["run", "chat"] {
        for (flag, value, expected) in &cases {
            let mut args = vec![command, flag, value];
            if command == "run" {
                args.push("hello");
            }
            let out = plughost(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(
                stderr.contains(&format!("invalid value '{value}' for '{flag} <"))
                    && stderr.contains(expected),
                "{args:?}: {stderr}"
            );
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }
}

#[test]
fn run_against_a_stalled_server_fails_at_the_model_timeout() {
    let s = serve(vec![Reply::Stall(String::new())]);
    let started = Instant::now();
    let out = plughost(&[
        "run",
        "--model",
        "openai:test-model",
        "--base-url",
        &s.url,
        "--model-timeout",
        "1",
        "hello",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Errors go to stderr, with their cause.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no answer from the model API") && stderr.contains("for 1 s"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn a_retry_after_streamed_text_is_marked_in_the_stream() {
    let cut = sse(&text_event("Hel"));
    let whole = sse(&format!("{}data: [DONE]\n\n", text_event("Hello")));
    let s = serve(vec![Reply::Send(cut), Reply::Send(whole)]);
    let p = provider(&s.url, Duration::from_secs(10));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let answer = rt
        .block_on(async {
            tokio::time::timeout(BOUND, p.complete(ChatRequest::default(), Some(tx))).await
        })
        .expect("the model call must end within the bound")
        .unwrap();
    assert_eq!(answer.text, "Hello", "the answer is the whole retry alone");
    let mut deltas = Vec::new();
    while let Ok(d) = rx.try_recv() {
        deltas.push(d);
    }
    assert_eq!(
        deltas,
        [
            "Hel",
            "\n[the model's answer broke off; asking again]\n",
            "Hello"
        ]
    );
}
