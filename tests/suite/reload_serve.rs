//! Reload under load (issue 24): 16 clients call a plugin's tool over MCP
//! and chat through it while `plughost serve --watch` sees the plugin's
//! file change 20 times. Every request is answered, each by a version the
//! plugin had, never with an error; afterwards the server has no more
//! worker processes and file descriptors than before.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

const CHANGES: u32 = 20;
const CLIENTS: usize = 16;

fn plugin_source(version: u32) -> String {
    format!(
        "def ver():\n    return 'v{version}'\n\ndef register(ctx):\n    ctx.register_tool('ver', {{'type': 'object', 'properties': {{}}}}, ver)\n"
    )
}

fn write_version(plugins: &Path, version: u32) {
    common::write_plugin(
        plugins,
        "ver",
        &format!("name: ver\nversion: '{version}'\n"),
        &[("__init__.py", &plugin_source(version))],
    );
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Open file descriptors of process `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Live child processes of `pid` (the isolated plugins' workers).
fn children(pid: u32) -> usize {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    procs
        .flatten()
        .filter_map(|p| std::fs::read_to_string(p.path().join("stat")).ok())
        .filter(|stat| {
            // pid (comm) state ppid ...: comm may hold spaces, so after ')'.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.first() != Some(&"Z") && fields.get(1) == Some(&pid.to_string().as_str())
        })
        .count()
}

async fn mcp_session(c: &reqwest::Client, url: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "reload-test", "version": "0"}}});
    let r = post_mcp(c, url, None, &init).await;
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let _ = r.text().await;
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let _ = post_mcp(c, url, Some(&session), &done).await.text().await;
    session
}

async fn post_mcp(
    c: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut r = c
        .post(format!("{url}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        r = r.header("mcp-session-id", s);
    }
    r.body(body.to_string()).send().await.unwrap()
}

/// The version a JSON-RPC `tools/call` answer (JSON or one SSE event) names.
fn mcp_version(body: &str) -> Result<u32, String> {
    let json = body
        .lines()
        .find_map(|l| l.strip_prefix("data: ").filter(|d| !d.trim().is_empty()))
        .unwrap_or(body);
    let v: Value = serde_json::from_str(json).map_err(|e| format!("{e}: {body}"))?;
    if v["result"]["isError"] == true || v.get("error").is_some() {
        return Err(body.to_string());
    }
    let text = v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    version_of(text).ok_or_else(|| body.to_string())
}

fn version_of(text: &str) -> Option<u32> {
    text.trim()
        .rsplit_once('v')
        .and_then(|(_, n)| n.trim().parse().ok())
}

/// One client: an MCP tool call and a chat turn through the tool, again
/// and again until `stop`; the versions that answered, or the first error.
async fn client(url: String, stop: Arc<AtomicBool>, id: usize) -> Result<Vec<u32>, String> {
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let session = mcp_session(&c, &url).await;
    let mut seen = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let call = json!({"jsonrpc": "2.0", "id": n + 1, "method": "tools/call",
            "params": {"name": "ver", "arguments": {}}});
        let r = post_mcp(&c, &url, Some(&session), &call).await;
        let status = r.status();
        let body = r.text().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("tools/call answered {status}: {body}"));
        }
        seen.push(mcp_version(&body)?);
        let reply = c
            .post(format!("{url}/v1/chat/completions"))
            .json(&json!({"model": "m", "messages": [{"role": "user", "content": format!("client {id} turn {n}")}]}))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = reply.status();
        let body: Value = reply.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("chat answered {status}: {body}"));
        }
        let text = body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default();
        let outcome = &body["plughost"]["tool_calls"][0]["outcome"];
        if outcome != "ok" {
            return Err(format!("the chat's tool call was not ok: {body}"));
        }
        seen.push(version_of(text).ok_or_else(|| format!("no version in {text:?}"))?);
    }
    let _ = c
        .delete(format!("{url}/mcp"))
        .header("mcp-session-id", &session)
        .send()
        .await;
    Ok(seen)
}

async fn loaded_version(c: &reqwest::Client, url: &str) -> Option<(u64, String)> {
    let v: Value = c
        .get(format!("{url}/admin/plugins"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let plugin = v["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["key"] == "ver")?
        .clone();
    Some((
        v["generation"].as_u64()?,
        plugin["version"].as_str()?.to_string(),
    ))
}

async fn wait_for_version(c: &reqwest::Client, url: &str, version: u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if loaded_version(c, url).await.map(|(_, v)| v) == Some(version.to_string()) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "version {version} never loaded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_clients_through_twenty_changes_are_all_answered_and_nothing_leaks() {
    let home = common::home_with(&["ver"]);
    let bundled = common::no_bundled();
    let plugins = home.path().join("plugins");
    write_version(&plugins, 0);
    let script = home.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: ver\n  - say: \"Done: {tool_results}\"\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home.path())
        .args([
            "serve", "--port", "0", "--watch", "--model", "scripted", "--script",
        ])
        .arg(&script)
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env_remove("PLUGHOST_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = common::serve_url(&mut child);
    let server = Server(child);
    let pid = server.0.id();
    let c = reqwest::Client::new();
    wait_for_version(&c, &url, 0).await;
    // The plugin runs isolated (serve's default for a third-party plugin).
    let workers_before = children(pid);
    assert!(workers_before >= 1, "no worker process");
    // Warm up (lazily opened files: an MCP session, and a turn, whose first
    // model iteration sets up the web tools' watch of config.json for the
    // process's life), then the baseline with no client connected.
    client(url.clone(), Arc::new(AtomicBool::new(true)), 99)
        .await
        .unwrap();
    let warm = c
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "warm up"}]}))
        .send()
        .await
        .unwrap();
    assert!(warm.status().is_success(), "{}", warm.status());
    drop(c);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fds_before = fds(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| tokio::spawn(client(url.clone(), stop.clone(), i)))
        .collect();
    let admin = reqwest::Client::new();
    for version in 1..=CHANGES {
        write_version(&plugins, version);
        wait_for_version(&admin, &url, version).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut answered = 0;
    let mut versions = std::collections::BTreeSet::new();
    for (i, handle) in clients.into_iter().enumerate() {
        let seen = handle
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("client {i}: {e}"));
        assert!(seen.iter().all(|v| *v <= CHANGES), "client {i}: {seen:?}");
        answered += seen.len();
        versions.extend(seen);
    }
    // The clients met more than one version: they ran across the reloads.
    assert!(versions.len() > 1, "{versions:?}");
    assert!(answered >= CLIENTS, "{answered} answers");
    let (generation, _) = loaded_version(&admin, &url).await.unwrap();
    assert!(generation >= u64::from(CHANGES), "generation {generation}");
    drop(admin);

    common::wait_until("the old workers to stop", Duration::from_secs(30), || {
        children(pid) <= workers_before
    });
    common::wait_until(
        "the file descriptors to come back",
        Duration::from_secs(30),
        || fds(pid) <= fds_before,
    );
    // `plugins doctor` shows what the running server loaded, and when.
    let mut doctor = Command::new(env!("CARGO_BIN_EXE_plughost"));
    doctor
        .arg("--home")
        .arg(home.path())
        .args(["plugins", "doctor"])
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env_remove("PLUGHOST_API_KEY");
    let out = common::run_bounded(doctor, Duration::from_secs(60));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Running server http://"), "{text}");
    assert!(
        text.contains(&format!("  ver {CHANGES}, loaded 20")),
        "{text}"
    );
    eprintln!(
        "{answered} answers; workers {workers_before} -> {}; fds {fds_before} -> {}",
        children(pid),
        fds(pid)
    );
}
