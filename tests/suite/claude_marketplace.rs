//! Claude Code plugins installed from a marketplace (issue 48, item 5),
//! then used through `run`, `serve` and `mcp`: a local marketplace and a
//! git one (a `file://` repository) listing the `kit` and `guarded`
//! plugins of [`crate::claude_plugin`] and [`crate::claude_hooks`].

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::claude_hooks::write_guarded;
use crate::claude_plugin::write_kit;
use crate::common;
use serde_json::{json, Value};

fn marketplace(dir: &Path) {
    write_kit(&dir.join("plugins/kit"));
    write_guarded(&dir.join("plugins/guarded"));
    std::fs::create_dir_all(dir.join(".claude-plugin")).unwrap();
    std::fs::write(
        dir.join(".claude-plugin/marketplace.json"),
        json!({"name": "local-market", "owner": {"name": "Tests"}, "plugins": [
            {"name": "kit", "source": "./plugins/kit", "description": "A kit"},
            {"name": "guarded", "source": "./plugins/guarded", "description": "Hooks"}
        ]})
        .to_string(),
    )
    .unwrap();
}

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            home: tempfile::tempdir().unwrap(),
            bundled: common::no_bundled(),
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_plughost"));
        c.arg("--home")
            .arg(self.home.path())
            .args(args)
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env_remove("PYTHONPATH")
            .current_dir(self.home.path());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let text = said(&out);
        assert!(out.status.success(), "{args:?} ({}): {text}", out.status);
        text
    }

    fn lock(&self) -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(self.home.path().join("plugins.lock.json")).unwrap(),
        )
        .unwrap()
    }
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: exec
        args: {command: "rm -rf build"}
  - say: "model got: {user_message} | {tool_results}"
"#;

#[test]
fn plugins_installed_from_a_local_marketplace_run_in_run_serve_and_mcp() {
    let market = tempfile::tempdir().unwrap();
    marketplace(market.path());
    let env = Env::new();
    let added = env.ok(&[
        "plugins",
        "marketplace",
        "add",
        market.path().to_str().unwrap(),
    ]);
    assert!(
        added.contains("Added marketplace local-market (2 plugins)"),
        "{added}"
    );
    let listed = env.ok(&["plugins", "marketplace", "list"]);
    assert!(listed.contains("kit@local-market  A kit"), "{listed}");
    let missing = env.run(&["plugins", "install", "nope@local-market"]);
    assert!(!missing.status.success());
    assert!(
        said(&missing).contains("lists no plugin 'nope'"),
        "{}",
        said(&missing)
    );
    for name in ["kit@local-market", "guarded@local-market"] {
        let out = env.ok(&["plugins", "install", name, "--enable"]);
        assert!(out.contains("Installed"), "{out}");
    }
    // Locked like any install: an entry with its content hash.
    let lock = env.lock();
    for key in ["kit", "guarded"] {
        assert!(
            lock["plugins"][key]["hash"]
                .as_str()
                .is_some_and(|h| !h.is_empty()),
            "{lock}"
        );
    }
    let script = env.home.path().join("script.yaml");
    std::fs::write(&script, SCRIPT).unwrap();
    let script = script.to_str().unwrap();

    // run: the command's prompt is the turn; the guard blocks the call.
    let out = env.ok(&[
        "run",
        "--json",
        "--model",
        "scripted",
        "--script",
        script,
        "/kit:fix 42 high",
    ]);
    assert!(
        out.contains("Fix issue #42 with priority high. All arguments: 42 high"),
        "the command's prompt is the turn's message: {out}"
    );
    assert!(
        out.contains("guarded: recursive rm is not allowed here"),
        "the PreToolUse guard's stderr is the blocked call's result: {out}"
    );

    // serve: the same through /v1/chat/completions.
    let mut child = env
        .cmd(&[
            "serve", "--port", "0", "--model", "scripted", "--script", script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = common::serve_url(&mut child);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let body: Value = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            // A named session keeps its transcript.
            .header("x-plughost-session", "served")
            .json(
                &json!({"model": "m", "messages": [{"role": "user", "content": "/kit:fix 7 low"}]}),
            )
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    // The named session's transcript holds the command's prompt as its
    // message (the server is stopped once it is there).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut stored = false;
    while !stored && std::time::Instant::now() < deadline {
        stored = transcripts(env.home.path()).contains("Fix issue #7 with priority low");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Stopped before asserting: a failing check leaves no server behind.
    let _ = child.kill();
    let _ = child.wait();
    assert!(stored, "the command's prompt is the served turn's message");
    let answer = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(answer.contains("recursive rm is not allowed"), "{body}");

    // mcp: the commands are prompts; getting one gives its prompt.
    let mut mcp = env
        .cmd(&["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = mcp.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = mcp.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut ask = |id: u64, method: &str, params: Value| -> Value {
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .unwrap();
        if id == 0 {
            loop {
                let v: Value =
                    serde_json::from_str(&rx.recv_timeout(Duration::from_secs(30)).unwrap())
                        .unwrap();
                if v["id"] == 0 {
                    writeln!(
                        stdin,
                        "{}",
                        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
                    )
                    .unwrap();
                    return v;
                }
            }
        }
        loop {
            let v: Value =
                serde_json::from_str(&rx.recv_timeout(Duration::from_secs(30)).unwrap()).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    };
    ask(
        0,
        "initialize",
        json!({"protocolVersion": "2025-03-26", "capabilities": {},
               "clientInfo": {"name": "test", "version": "0"}}),
    );
    let prompts = ask(1, "prompts/list", json!({}));
    let names: Vec<&str> = prompts["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(names.iter().any(|n| n.contains("kit:fix")), "{prompts}");
    let name = names
        .iter()
        .find(|n| n.contains("kit:fix"))
        .unwrap()
        .to_string();
    let got = ask(
        2,
        "prompts/get",
        json!({"name": name, "arguments": {"args": "9 mid"}}),
    );
    assert!(
        got.to_string().contains("Fix issue #9 with priority mid"),
        "{got}"
    );
    let _ = mcp.kill();
    let _ = mcp.wait();

    // Drift: an installed hook changed is refused until accepted.
    std::fs::write(
        env.home.path().join("plugins/guarded/hooks/guard.sh"),
        "exit 0\n",
    )
    .unwrap();
    let list = env.ok(&["plugins", "list"]);
    assert!(
        list.contains("its files changed since it was installed"),
        "{list}"
    );
    let accepted = env.ok(&["plugins", "accept", "guarded"]);
    assert!(accepted.contains("modified: hooks/guard.sh"), "{accepted}");
    let list = env.ok(&["plugins", "list"]);
    assert!(!list.contains("its files changed"), "{list}");
}

/// Every file's text under `dir` (the stored transcripts).
fn transcripts(dir: &Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            if !path.ends_with("plugins") {
                out.push_str(&transcripts(&path));
            }
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            out.push_str(&text);
        }
    }
    out
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", said(&out));
}

#[test]
fn a_git_marketplace_is_cloned_updated_and_installs_pinned_at_its_commit() {
    let repo = tempfile::tempdir().unwrap();
    marketplace(repo.path());
    git(repo.path(), &["init", "--quiet", "-b", "main"]);
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "--quiet", "-m", "one"]);
    let url = format!("file://{}", repo.path().display());
    let env = Env::new();
    env.ok(&["plugins", "marketplace", "add", &url]);
    let out = env.ok(&["plugins", "install", "guarded@local-market", "--enable"]);
    assert!(out.contains("Installed guarded"), "{out}");
    let lock = env.lock();
    let entry = &lock["plugins"]["guarded"];
    let head = String::from_utf8(
        Command::new("git")
            .arg("-C")
            .arg(repo.path())
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        entry.to_string().contains(head.trim()),
        "pinned at the marketplace's commit: {entry}"
    );
    // A new plugin in the repository shows after update.
    let mut m: Value = serde_json::from_str(
        &std::fs::read_to_string(repo.path().join(".claude-plugin/marketplace.json")).unwrap(),
    )
    .unwrap();
    m["plugins"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "kit2", "source": "./plugins/kit"}));
    std::fs::write(
        repo.path().join(".claude-plugin/marketplace.json"),
        m.to_string(),
    )
    .unwrap();
    git(repo.path(), &["commit", "--quiet", "-am", "two"]);
    let out = env.ok(&["plugins", "marketplace", "update"]);
    assert!(
        out.contains("Updated marketplace local-market (3 plugins)"),
        "{out}"
    );
    let listed = env.ok(&["plugins", "marketplace", "list", "--json"]);
    assert!(listed.contains("kit2"), "{listed}");
}
