//! The OpenAI-compatible provider against a stub server on loopback:
//! streaming text and tool calls, retries on 429/5xx, clear 4xx errors.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{no_bundled, write_plugin};
use plughost::agent::provider::openai::OpenAi;
use plughost::agent::provider::{ChatRequest, Provider};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::Host;
use serde_json::{json, Value};

/// Serves the canned responses in order, one per connection, recording
/// each request body. Stops after the last one.
struct Stub {
    url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

fn stub(responses: Vec<String>) -> Stub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    std::thread::spawn(move || {
        for response in responses {
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
            seen.lock()
                .unwrap()
                .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
            stream.write_all(response.as_bytes()).unwrap();
            let _ = stream.flush();
        }
    });
    Stub { url, requests }
}

fn sse(events: &[Value]) -> String {
    let mut body = String::new();
    for e in events {
        body.push_str(&format!("data: {e}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n{body}")
}

fn status(code: u16, reason: &str, body: &str, extra: &str) -> String {
    format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )
}

fn text_chunks(text: &str) -> Vec<Value> {
    let mut events: Vec<Value> = text
        .split_inclusive(' ')
        .map(|t| json!({"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": null}]}))
        .collect();
    events.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
    events.push(json!({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}}));
    events
}

fn provider(url: &str) -> OpenAi {
    let mut p = OpenAi::from_env("test-model", Some(url.to_string())).unwrap();
    p.backoff = Duration::from_millis(20);
    p
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn streams_text_and_reports_usage() {
    let s = stub(vec![sse(&text_chunks("Hello there friend"))]);
    let p = provider(&s.url);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let request = ChatRequest {
        system: "be brief".into(),
        messages: vec![json!({"role": "user", "content": "hi"})].into(),
        ..Default::default()
    };
    let response = rt().block_on(p.complete(request, Some(tx))).unwrap();
    assert_eq!(response.text, "Hello there friend");
    assert_eq!(response.usage["total_tokens"], 14);
    let mut deltas = Vec::new();
    while let Ok(d) = rx.try_recv() {
        deltas.push(d);
    }
    assert_eq!(
        deltas,
        ["Hello ", "there ", "friend"],
        "deltas stream as they arrive"
    );
    let sent = &s.requests.lock().unwrap()[0];
    assert_eq!(sent["model"], "test-model");
    assert_eq!(sent["stream"], true);
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
}

#[test]
fn retries_server_errors_and_rate_limits_then_fails_clearly_on_4xx() {
    let s = stub(vec![
        status(
            500,
            "Internal Server Error",
            r#"{"error": {"message": "boom"}}"#,
            "",
        ),
        status(
            429,
            "Too Many Requests",
            r#"{"error": {"message": "slow down"}}"#,
            "Retry-After: 0\r\n",
        ),
        sse(&text_chunks("third time lucky")),
        status(
            401,
            "Unauthorized",
            r#"{"error": {"message": "Incorrect API key provided"}}"#,
            "",
        ),
    ]);
    let p = provider(&s.url);
    let rt = rt();
    let ok = rt
        .block_on(p.complete(ChatRequest::default(), None))
        .unwrap();
    assert_eq!(ok.text, "third time lucky");
    let err = rt
        .block_on(p.complete(ChatRequest::default(), None))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "the model API answered 401: Incorrect API key provided"
    );
    assert_eq!(s.requests.lock().unwrap().len(), 4, "401 is not retried");
}

#[test]
fn a_whole_turn_with_streamed_tool_calls() {
    let tool_call_chunks = vec![
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "shout", "arguments": ""}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"text\": "}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"hey\"}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "shout", "arguments": "{\"text\": \"you\"}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ];
    let s = stub(vec![
        sse(&tool_call_chunks),
        sse(&text_chunks("HEY and YOU")),
    ]);
    let home = tempfile::tempdir().unwrap();
    write_plugin(
        &home.path().join("plugins"),
        "shouter",
        "name: shouter\n",
        &[("__init__.py", "def register(ctx):\n    ctx.register_tool('shout', {'type': 'object', 'properties': {'text': {'type': 'string'}}, 'required': ['text']}, lambda text: text.upper())\n")],
    );
    let bundled = no_bundled();
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .enable(["shouter"])
        .build()
        .unwrap();
    let provider = Arc::new(provider(&s.url));
    let rt = rt();
    let agent = Agent::new(Arc::new(host), provider, AgentConfig::default(), None);
    let report = rt.block_on(agent.send(Inbound::new("oa", "shout hey and you"), None));
    assert!(report.completed, "{:?}", report.error);
    assert_eq!(report.reply.as_deref(), Some("HEY and YOU"));
    let results: Vec<&str> = report
        .tool_calls
        .iter()
        .map(|c| c.result.as_str())
        .collect();
    assert_eq!(results, ["HEY", "YOU"]);
    let second = s.requests.lock().unwrap()[1].clone();
    let messages = second["messages"].as_array().unwrap();
    let tools: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tools[0]["tool_call_id"], "call_a");
    assert_eq!(tools[0]["content"], "HEY");
    assert_eq!(tools[1]["tool_call_id"], "call_b");
    assert!(
        messages.iter().all(|m| m.get("ts").is_none()),
        "bookkeeping stays out of the request"
    );
    assert_eq!(
        s.requests.lock().unwrap()[0]["tools"][0]["function"]["name"],
        "shout"
    );
}

#[test]
fn an_unreachable_server_is_a_failed_turn_not_a_crash() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener); // nothing listens there now
    let home = tempfile::tempdir().unwrap();
    let bundled = no_bundled();
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let rt = rt();
    let agent = Agent::new(
        Arc::new(host),
        Arc::new(provider(&url)),
        AgentConfig::default(),
        None,
    );
    let report = rt.block_on(agent.send(Inbound::new("down", "hello?"), None));
    assert!(!report.completed);
    let reply = report.reply.unwrap();
    assert!(
        reply.starts_with("Error: model call failed: network error talking to"),
        "{reply}"
    );
}
