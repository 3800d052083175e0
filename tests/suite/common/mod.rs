//! Helpers shared by the integration tests: plugin directories on disk.
#![allow(dead_code)]

pub mod hermes_env;

use std::path::{Path, PathBuf};

/// Write a plugin directory `root/dir` with a manifest and Python files.
pub fn write_plugin(root: &Path, dir: &str, manifest: &str, files: &[(&str, &str)]) -> PathBuf {
    let path = root.join(dir);
    std::fs::create_dir_all(&path).unwrap();
    if !manifest.is_empty() {
        std::fs::write(path.join("plugin.yaml"), manifest).unwrap();
    }
    for (name, text) in files {
        let file = path.join(name);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }
    path
}

/// The parity switch (issue 47): `PLUGHOST_TEST_ISOLATE=all` runs the
/// tests with every plugin isolated (`bash tests/run_all.sh` runs the
/// dialect behaviour tests a second time so). The homes the helpers write
/// then say `"plugins": {"isolate": "all"}`, which the CLI and the host
/// builder honour as `--isolate all` (an explicit `--isolate` or builder
/// setting of a test still wins).
pub fn isolate_all() -> bool {
    std::env::var("PLUGHOST_TEST_ISOLATE").is_ok_and(|v| v == "all")
}

/// A test that can only run in-process (it inspects the main process's
/// own interpreter, say): under the parity switch it says so by name and
/// is counted skipped (returns `true`: the caller returns at once).
pub fn in_process_only(test: &str, why: &str) -> bool {
    if isolate_all() {
        let line = format!("SKIPPED (in-process only) {test}: {why}");
        eprintln!("{line}");
        // libtest keeps a passing test's output: the run lists them here.
        if let Ok(path) = std::env::var("PLUGHOST_TEST_SKIPPED_LOG") {
            use std::io::Write;
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = writeln!(f, "{line}");
            }
        }
        return true;
    }
    false
}

/// `plughost::Host::builder()` as the dialect tests use it: under the
/// parity switch, every plugin isolated, its worker the plughost binary
/// (this test binary cannot serve as one).
pub fn builder() -> plughost::HostBuilder {
    let builder = plughost::Host::builder();
    if !isolate_all() {
        return builder;
    }
    builder
        .isolate(plughost::plugins::config::Isolation::All)
        .worker_command(plughost::isolation::WorkerCommand::binary(env!(
            "CARGO_BIN_EXE_plughost"
        )))
}

/// `config` (a `config.json` document) with the parity switch applied.
pub fn with_test_isolation(mut config: serde_json::Value) -> serde_json::Value {
    if isolate_all() {
        if let Some(plugins) = config
            .as_object_mut()
            .map(|c| c.entry("plugins").or_insert_with(|| serde_json::json!({})))
            .and_then(|p| p.as_object_mut())
        {
            plugins
                .entry("isolate")
                .or_insert_with(|| serde_json::json!("all"));
        }
    }
    config
}

/// A fresh home with `plugins/` and a config enabling `enabled`.
pub fn home_with(enabled: &[&str]) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("plugins")).unwrap();
    let config =
        with_test_isolation(serde_json::json!({"plugins": {"enabled": enabled, "disabled": []}}));
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    home
}

/// An empty directory to use as the bundled root, so tests see only their plugins.
pub fn no_bundled() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Run a plughost command to its end, with its output; kill it and fail
/// the test past `limit` (a hung child must not hang the suite).
pub fn run_bounded(cmd: std::process::Command, limit: std::time::Duration) -> std::process::Output {
    run_bounded_pid(cmd, limit).1
}

/// [`run_bounded`], with the process id it ran as (to tell what ran in
/// plughost's own process from what ran in a worker).
pub fn run_bounded_pid(
    mut cmd: std::process::Command,
    limit: std::time::Duration,
) -> (u64, std::process::Output) {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => (u64::from(pid), out.unwrap()),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .arg("-9")
                .arg(pid.to_string())
                .status();
            panic!("plughost did not finish within {limit:?}");
        }
    }
}

/// A plugin (`__init__.py` source) whose `meet` tool is a barrier: each call
/// waits until `n` calls with the same `key` are inside at once, then all
/// return `met {n}`. Calls that do not overlap never fill the room, so the
/// first one returns `alone: k of n inside` after `timeout` seconds.
/// This proves overlap by what happened, not by how long it took.
pub const BARRIER_PLUGIN: &str = r#"
import asyncio, time
_ROOMS = {}

async def meet(key: str, n: int, timeout: float = 60):
    room = _ROOMS.setdefault(key, {"inside": 0, "open": False})
    room["inside"] += 1
    deadline = time.monotonic() + timeout
    while not room["open"]:
        if room["inside"] >= n:
            room["open"] = True
            break
        if time.monotonic() > deadline:
            return f"alone: {room['inside']} of {n} inside"
        await asyncio.sleep(0.005)
    return f"met {n}"

def register(ctx):
    ctx.register_tool("meet", {"type": "object", "properties": {"key": {"type": "string"}, "n": {"type": "integer"}, "timeout": {"type": "number"}}}, meet)
"#;

/// Poll `ready` every 10 ms until it holds; fail the test past `limit`.
/// For waiting on something to happen instead of sleeping a guessed time.
pub fn wait_until(what: &str, limit: std::time::Duration, mut ready: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The address a started `plughost serve` announces on standard error
/// (`http://127.0.0.1:PORT`); the rest of its standard error is drained
/// on a thread so the server never blocks writing it.
pub fn serve_url(child: &mut std::process::Child) -> String {
    use std::io::{BufRead, Read};
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr piped"));
    let mut line = String::new();
    let url = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "serve ended early"
        );
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
    });
    url
}

/// [`serve_url`] for a server whose later stderr lines the test reads:
/// the URL it listens on (waiting at most 60 s), its stderr lines from
/// then on, one by one, and those it printed before.
pub fn serve_lines(
    child: &mut std::process::Child,
) -> (String, std::sync::mpsc::Receiver<String>, Vec<String>) {
    use std::io::BufRead;
    let stderr = child.stderr.take().expect("stderr piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = Vec::new();
    let url = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("serve did not start: {seen:?}"));
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
        seen.push(line);
    };
    (url, rx, seen)
}

/// One `/v1/chat/completions` request with `content` as the user's
/// message to a started `plughost serve`, which is then stopped: the
/// answer's status and body.
pub async fn chat_once(mut child: std::process::Child, content: &str) -> (u16, serde_json::Value) {
    let url = serve_url(&mut child);
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    let response = client
        .post(format!("{url}/v1/chat/completions"))
        .json(
            &serde_json::json!({"model": "m", "messages": [{"role": "user", "content": content}]}),
        )
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: serde_json::Value = response.json().await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
    (status, body)
}

/// Fails the test that needs what is not installed here, naming it and how
/// to get it: a test never passes having tested nothing. `bash
/// tests/run_all.sh` (the README's test command) installs all of these.
pub fn missing(what: &str, how: &str) -> ! {
    panic!("this test needs {what}, which is not installed here: {how} (bash tests/run_all.sh installs it)")
}

/// Plughost's Python must import FastAPI (the ASGI app Felix plugin routes
/// mount on): the test fails saying how to install it when not.
pub fn require_fastapi() {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import fastapi"])
        .env_remove("PYTHONPATH")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        missing("FastAPI for python3", "pip install fastapi");
    }
}

/// A fresh home whose config enables and trusts `plugins`: `serve` runs
/// trusted plugins in-process, and isolates other third-party ones.
pub fn trusted_home(plugins: &[&str]) -> tempfile::TempDir {
    let home = home_with(plugins);
    let config = with_test_isolation(
        serde_json::json!({"plugins": {"enabled": plugins, "disabled": [], "trusted": plugins}}),
    );
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    home
}

/// A Felix source tree `plugins/felix-<key>` under `home`: a
/// `pyproject.toml` declaring the `felix.plugins` entry point `<key>`, and
/// `src/felix_<key>/__init__.py` holding `code`. Its `__init__.py` path.
pub fn felix_tree(home: &Path, key: &str, code: &str) -> PathBuf {
    let tree = home.join("plugins").join(format!("felix-{key}"));
    let package = format!("felix_{key}");
    std::fs::create_dir_all(tree.join("src").join(&package)).unwrap();
    std::fs::write(
        tree.join("pyproject.toml"),
        format!("[project]\nname = \"felix-{key}\"\nversion = \"0.1.0\"\n\n[project.entry-points.\"felix.plugins\"]\n{key} = \"{package}:register\"\n"),
    )
    .unwrap();
    let init = tree.join("src").join(&package).join("__init__.py");
    std::fs::write(&init, code).unwrap();
    init
}
