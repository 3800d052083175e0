//! Issue 27 item 7: a 40 MiB MCP stdio request gets a JSON-RPC error
//! answer (with its id) instead of silence, and the session goes on.
use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

#[test]
fn a_40_mib_stdio_request_is_answered_with_an_error_and_the_session_goes_on() {
    let home = common::home_with(&[]);
    let bundled = common::no_bundled();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home.path())
        .arg("mcp")
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env_remove("PLUGHOST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let answer = |id: u64| -> Value {
        loop {
            let line = rx.recv_timeout(Duration::from_secs(30)).expect("an answer");
            let v: Value = serde_json::from_str(&line).expect(&line);
            if v["id"] == id {
                return v;
            }
        }
    };
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}})
    )
    .unwrap();
    answer(0);
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    // The id first, then 40 MiB of arguments.
    let big = "x".repeat(40 << 20);
    let writer = std::thread::spawn(move || {
        writeln!(stdin, "{{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{{\"name\":\"nope\",\"arguments\":{{\"blob\":\"{big}\"}}}}}}").unwrap();
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"})
        )
        .unwrap();
        stdin
    });
    let too_big = answer(5);
    assert_eq!(too_big["error"]["code"], -32600, "{too_big}");
    assert!(
        too_big["error"]["message"]
            .as_str()
            .unwrap()
            .contains("request too large"),
        "{too_big}"
    );
    let listed = answer(6);
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    drop(writer.join().unwrap());
    let _ = child.kill();
    let _ = child.wait();
}
