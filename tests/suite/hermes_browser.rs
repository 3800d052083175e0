//! Hermes browser providers (issue 22, item 3): a provider written in the
//! test in Hermes's shape (`agent.browser_provider.BrowserProvider`) whose
//! `create_session` starts a local headless Chromium (Debian's package) and
//! returns its CDP websocket; the `browser_*` tools Hermes offers, with its
//! schemas, drive it through `plughost run` with the scripted model:
//! navigate, snapshot with refs, type, click (a form submitted), a full
//! snapshot of the result, back, images, close (the provider's
//! `close_session`). `plugins doctor` says which provider is active and
//! why another is not. Fails, saying how to install it, without `chromium` on PATH.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{run_bounded, write_plugin};
use serde_json::Value;

const PROVIDER: &str = r#"
import json, os, re, shutil, signal, subprocess, tempfile
from agent.browser_provider import BrowserProvider

def _log(event, **fields):
    with open(os.environ["BR_LOG"], "a") as f:
        f.write(json.dumps({"event": event, **fields}) + "\n")

_children = {}

class LocalChromium(BrowserProvider):
    @property
    def name(self):
        return "local-chromium"

    def is_available(self):
        return True

    def create_session(self, task_id):
        profile = tempfile.mkdtemp(prefix="plughost-chromium-")
        child = subprocess.Popen(
            ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TMPDIR": profile}, start_new_session=True)
        for line in child.stderr:
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            if found:
                break
        else:
            shutil.rmtree(profile, ignore_errors=True)
            raise RuntimeError("chromium did not start")
        _children[str(child.pid)] = (child, profile)
        _log("create_session", task_id=task_id)
        return {"session_name": f"local_{task_id}", "bb_session_id": str(child.pid),
                "cdp_url": found.group(1), "features": {"local": True}}

    def close_session(self, session_id):
        child, profile = _children.pop(session_id, (None, None))
        if child:
            # Chromium's own children too, or one writes into the profile
            # after it is removed.
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            shutil.rmtree(profile, ignore_errors=True)
        _log("close_session", known=child is not None)
        return True

    def emergency_cleanup(self, session_id):
        _log("emergency_cleanup")
        self.close_session(session_id)

class Unused(BrowserProvider):
    name = "cloudy"
    def is_available(self): return True
    def create_session(self, task_id): raise RuntimeError("never")
    def close_session(self, session_id): return False
    def emergency_cleanup(self, session_id): pass

def register(ctx):
    ctx.register_browser_provider(LocalChromium())
    ctx.register_browser_provider(Unused())
"#;

const PAGE: &str = r#"<html><head><title>Search page</title></head><body>
<h1>Search</h1>
<form action="result.html"><input name="q" placeholder="Query"><button type="submit">Go</button></form>
<a href="result.html?q=link">Result link</a>
<img src="logo.png" alt="Logo">
</body></html>"#;

const RESULT: &str = r#"<html><head><title>Results</title></head><body>
<h1>Results</h1><p id="p"></p>
<script>document.getElementById('p').textContent = 'You searched for ' + new URLSearchParams(location.search).get('q');</script>
</body></html>"#;

/// Chromium must be on PATH: the test fails saying how to install it when not.
fn require_chromium() {
    let found = Command::new("chromium")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        common::missing("Chromium on PATH", "apt-get install chromium");
    }
}

struct Env {
    plughost_home: tempfile::TempDir,
    hermes_home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn new(selected: &str) -> Env {
        let env = Env {
            plughost_home: tempfile::tempdir().unwrap(),
            hermes_home: tempfile::tempdir().unwrap(),
            bundled: tempfile::tempdir().unwrap(),
        };
        let config =
            format!("plugins:\n  enabled: [browsers]\nbrowser:\n  cloud_provider: {selected}\n");
        std::fs::write(env.hermes_home.path().join("config.yaml"), config).unwrap();
        // Chromium's process singleton is a Unix socket, which a confined
        // worker may open only when the plugin's sandbox says so (`run`
        // isolates third-party plugins by default; docs/security.md).
        std::fs::write(
            env.plughost_home.path().join("config.json"),
            r#"{"plugins": {"entries": {"browsers": {"sandbox": {"unix_sockets": true}}}}}"#,
        )
        .unwrap();
        let plugins = env.hermes_home.path().join("plugins");
        write_plugin(
            &plugins,
            "browsers",
            "name: browsers\nversion: 0.1.0\n",
            &[("__init__.py", PROVIDER)],
        );
        env
    }

    fn site(&self) -> PathBuf {
        let site = self.plughost_home.path().join("site");
        std::fs::create_dir_all(&site).unwrap();
        std::fs::write(site.join("page.html"), PAGE).unwrap();
        std::fs::write(site.join("result.html"), RESULT).unwrap();
        site
    }

    fn log(&self) -> PathBuf {
        self.plughost_home.path().join("br.log")
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.plughost_home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes_home.path())
            .env("BR_LOG", self.log())
            .env_remove("PLUGHOST_LOG")
            .env_remove("HERMES_ENABLE_PROJECT_PLUGINS");
        run_bounded(cmd, Duration::from_secs(90))
    }
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_active_provider_backs_the_browser_tools_in_a_turn() {
    require_chromium();
    let env = Env::new("local-chromium");
    let page = format!("file://{}/page.html", env.site().display());
    let script = format!(
        r#"turns:
  - tool_calls: [{{name: browser_back, args: {{}}}}]
  - tool_calls: [{{name: browser_navigate, args: {{url: "{page}"}}}}]
  - tool_calls: [{{name: browser_snapshot, args: {{}}}}]
  - tool_calls: [{{name: browser_type, args: {{ref: "@e1", text: "plughost"}}}}]
  - tool_calls: [{{name: browser_click, args: {{ref: "@e2"}}}}]
  - tool_calls: [{{name: browser_snapshot, args: {{full: true}}}}]
  - tool_calls: [{{name: browser_back, args: {{}}}}]
  - tool_calls: [{{name: browser_get_images, args: {{}}}}]
  - tool_calls: [{{name: browser_click, args: {{ref: "@e9"}}}}]
  - tool_calls: [{{name: browser_close, args: {{}}}}]
  - say: done
"#
    );
    let path = env.plughost_home.path().join("script.yaml");
    std::fs::write(&path, script).unwrap();
    let out = env.run(&[
        "run",
        "browse",
        "--json",
        "--model",
        "scripted",
        "--script",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", said(&out));
    let turn: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut results: Vec<Value> = turn["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| serde_json::from_str(c["result"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(results.len(), 10, "{turn:#}");
    // Back before any page: an error result the model can act on.
    let first = results.remove(0);
    assert_eq!(first["success"], false, "{first}");
    assert!(
        first["error"]
            .as_str()
            .is_some_and(|e| e.contains("there is no previous page")),
        "{first}"
    );
    assert_eq!(results[0]["success"], true, "{}", results[0]);
    assert_eq!(results[0]["title"], "Search page");
    let snapshot = results[1]["snapshot"].as_str().unwrap();
    assert!(
        snapshot.contains("- heading \"Search\" [level=1]"),
        "{snapshot}"
    );
    assert!(
        snapshot.contains("- textbox \"Query\" [ref=@e1]"),
        "{snapshot}"
    );
    assert!(snapshot.contains("- button \"Go\" [ref=@e2]"), "{snapshot}");
    assert!(
        snapshot.contains("- link \"Result link\" [ref=@e3]"),
        "{snapshot}"
    );
    assert_eq!(results[1]["element_count"], 3, "{}", results[1]);
    assert_eq!(results[2]["typed"], "plughost", "{}", results[2]);
    assert_eq!(results[3]["clicked"], "@e2", "{}", results[3]);
    let full = results[4]["snapshot"].as_str().unwrap();
    assert!(full.contains("- text: You searched for plughost"), "{full}");
    assert!(
        results[5]["url"]
            .as_str()
            .is_some_and(|u| u.ends_with("/page.html")),
        "{}",
        results[5]
    );
    assert_eq!(results[6]["count"], 1, "{}", results[6]);
    assert_eq!(results[6]["images"][0]["alt"], "Logo");
    assert_eq!(
        results[7]["success"], false,
        "a stale ref is an error result"
    );
    assert!(
        results[7]["error"]
            .as_str()
            .unwrap()
            .contains("no element @e9"),
        "{}",
        results[7]
    );
    assert_eq!(
        results[8],
        serde_json::json!({"success": true, "closed": true})
    );
    let log = events(&env.log());
    let names: Vec<&str> = log.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(names, ["create_session", "close_session"], "{log:#?}");
    assert_eq!(log[1]["known"], true);
    // The model was offered Hermes's tools with Hermes's schemas.
    let offered = &turn["model_calls"][0]["tools"];
    for tool in [
        "browser_navigate",
        "browser_snapshot",
        "browser_click",
        "browser_type",
        "browser_scroll",
        "browser_back",
        "browser_press",
        "browser_close",
        "browser_get_images",
    ] {
        assert!(
            offered.as_array().unwrap().contains(&tool.into()),
            "{tool}: {offered}"
        );
    }
}

#[test]
fn doctor_says_which_provider_is_active_and_why_the_other_is_not() {
    let env = Env::new("local-chromium");
    let out = env.run(&["plugins", "doctor"]);
    let text = said(&out);
    assert!(
        text.contains("browser provider 'local-chromium': active (backs the browser_* tools)"),
        "{text}"
    );
    assert!(
        text.contains(
            "browser provider 'cloudy': not active: browser.cloud_provider is 'local-chromium'"
        ),
        "{text}"
    );
    let out = env.run(&["tools", "list"]);
    assert!(said(&out).contains("browser_navigate"), "{}", said(&out));

    let other = Env::new("nowhere");
    let out = other.run(&["plugins", "doctor"]);
    let text = said(&out);
    assert!(
        text.contains(
            "browser provider 'local-chromium': not active: browser.cloud_provider is 'nowhere'"
        ),
        "{text}"
    );
    let out = other.run(&["tools", "list"]);
    assert!(!said(&out).contains("browser_navigate"), "{}", said(&out));
}

/// Through `plughost serve`: a `/v1/chat/completions` turn browses with
/// the provider's browser, and the end of the request's conversation
/// releases it (`close_session`, before the answer is sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_tools_answer_through_serve() {
    require_chromium();
    let env = Env::new("local-chromium");
    let page = format!("file://{}/page.html", env.site().display());
    let script = format!(
        "turns:\n  - tool_calls: [{{name: browser_navigate, args: {{url: \"{page}\"}}}}]\n  - tool_calls: [{{name: browser_snapshot, args: {{}}}}]\n  - say: \"served: {{tool_results}}\"\n"
    );
    let path = env.plughost_home.path().join("serve.yaml");
    std::fs::write(&path, script).unwrap();
    // serve confines the isolated provider (docs/security.md): Chromium
    // needs Unix sockets of its own, which a sandbox refuses by default.
    std::fs::write(
        env.plughost_home.path().join("config.json"),
        r#"{"plugins": {"entries": {"browsers": {"sandbox": {"unix_sockets": true}}}}}"#,
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["serve", "--port", "0", "--model", "scripted", "--script"])
        .arg(&path)
        .env("PLUGHOST_HOME", env.plughost_home.path())
        .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
        .env("HERMES_HOME", env.hermes_home.path())
        .env("BR_LOG", env.log())
        .env_remove("PLUGHOST_LOG")
        .env_remove("HERMES_ENABLE_PROJECT_PLUGINS")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (status, body) = common::chat_once(child, "browse").await;
    assert_eq!(status, 200, "{body:#}");
    let reply = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(reply.starts_with("served: "), "{body:#}");
    assert!(reply.contains(r#"- button \"Go\" [ref=@e2]"#), "{reply}");
    let log = events(&env.log());
    let names: Vec<&str> = log.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(names, ["create_session", "close_session"], "{log:#?}");
}
