//! MCP-server tools through `plughost serve` (issue 22, item 4, "through
//! serve"): `mcp_servers` of `config.json` name a stdio server and a
//! streamable-HTTP one (written with the official Python `mcp` package);
//! a `/v1/chat/completions` request with the scripted model calls a tool
//! of each, and the answer carries both results.
use crate::common;

use std::process::{Command, Stdio};

use crate::mcp_client_common::{mcp_python, server_file, HttpServer};
use serde_json::json;

const SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: mcp_local_echo
        args: {text: "through serve"}
      - name: mcp_remote_add
        args: {a: 19, b: 23}
  - say: "served: {tool_results}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_mcp_server_tools_answer_through_serve_chat_completions() {
    let Some(python) = mcp_python() else { return };
    let home = common::home_with(&[]);
    let bundled = common::no_bundled();
    let work = tempfile::tempdir().unwrap();
    let server = server_file(work.path());
    let http = HttpServer::start(&python, &server);
    std::fs::write(
        home.path().join("config.json"),
        json!({"mcp_servers": {
            "local": {"command": python, "args": [server, "stdio"], "env": {"GREETING": "hi"}},
            "remote": {"url": http.url}
        }})
        .to_string(),
    )
    .unwrap();
    let script = work.path().join("script.yaml");
    std::fs::write(&script, SCRIPT).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["serve", "--port", "0", "--model", "scripted", "--script"])
        .arg(&script)
        .env("PLUGHOST_HOME", home.path())
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env_remove("PYTHONPATH")
        .env_remove("PLUGHOST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, body) = common::chat_once(child, "go").await;
    assert_eq!(status, 200, "{body:#}");
    let reply = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(reply.starts_with("served: "), "{body:#}");
    assert!(reply.contains("echo: through serve (hi)"), "{body:#}");
    assert!(reply.contains("42"), "{body:#}");
}
