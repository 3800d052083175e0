//! A Claude Code bundle's MCP servers and SessionStart context when the
//! bundle runs isolated (issues 48 and 50): the host starts the servers
//! confined as the bundle's worker is, their tools reach the registry
//! (through `serve`'s defaults and `--isolate all`), and a `SessionStart`
//! hook's context reaches the model from the worker. The same bundle
//! trusted (in-process, unconfined) shows each denial is the sandbox's.
//!
//! Each case holds the user's home (`HOME`, with a fake key under
//! `.ssh`), plughost's home inside it, and `TMPDIR`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::run_bounded;
use crate::mcp_client_common::mcp_python;
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(90);

/// The bundle's MCP server: what it may read and write.
const SERVER: &str = r#"
import json, os, sys
try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server

HERE = os.path.dirname(os.path.abspath(__file__))
app = Server("probe")

def _try(f):
    try:
        f()
        return "ok"
    except BaseException as e:
        return type(e).__name__

def _read(path):
    with open(path) as f:
        f.read()

def _write(path):
    with open(path, "w") as f:
        f.write("x")

@app.tool()
def files() -> str:
    """What this server may touch."""
    return json.dumps({
        "ssh_key": _try(lambda: _read(os.path.expanduser("~/.ssh/id_ed25519"))),
        "own_file": _try(lambda: _read(os.path.join(HERE, "notes.txt"))),
        "data_dir": _try(lambda: _write(os.path.join(os.environ["PROBE_DATA"], "d.txt"))),
        "outside": _try(lambda: _write(os.path.join(os.environ["HOME"], "x.txt"))),
    }, sort_keys=True)

@app.tool()
def connect(port: str) -> str:
    """Connect to a loopback port."""
    import socket
    return _try(lambda: socket.create_connection(("127.0.0.1", int(port)), timeout=5).close())

app.run("stdio")
"#;

/// The Claude Code plugin `probe`: an MCP server started by an absolute
/// interpreter path, and a SessionStart hook giving context.
fn write_probe(dir: &Path, python: &str) {
    for d in [".claude-plugin", "hooks"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(
        dir.join(".claude-plugin/plugin.json"),
        json!({"name": "probe", "version": "1.0.0", "description": "Probes its sandbox"})
            .to_string(),
    )
    .unwrap();
    std::fs::write(dir.join("server.py"), SERVER).unwrap();
    std::fs::write(dir.join("notes.txt"), "its own").unwrap();
    std::fs::write(
        dir.join(".mcp.json"),
        json!({"mcpServers": {"probe": {"command": python,
            "args": ["${CLAUDE_PLUGIN_ROOT}/server.py"],
            "env": {"PROBE_DATA": "${CLAUDE_PLUGIN_DATA}"}}}})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("hooks/hooks.json"),
        json!({"hooks": {"SessionStart": [{"matcher": "startup", "hooks": [{"type": "command",
            "command": "echo \"project rules: $(cat ${CLAUDE_PLUGIN_ROOT}/notes.txt)\""}]}]}})
        .to_string(),
    )
    .unwrap();
}

/// Fails (never passes quietly) where the kernel lacks what is tested.
fn require_kernel() {
    let missing = plughost::isolation::sandbox::support().missing();
    assert!(
        missing.is_empty(),
        "this test needs Landlock, network namespaces and a writable cgroup v2; here plughost cannot enforce: {}",
        missing.join(", ")
    );
}

struct Case {
    root: tempfile::TempDir,
}

impl Case {
    fn new(plugins: Value) -> Option<Case> {
        let python = mcp_python()?;
        // The absolute path, as Claude Code plugins name their interpreter.
        let out = Command::new(&python)
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .unwrap();
        let python = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let case = Case {
            root: tempfile::tempdir().unwrap(),
        };
        for dir in ["home/.ssh", "tmp", "bundled"] {
            std::fs::create_dir_all(case.path(dir)).unwrap();
        }
        std::fs::write(case.path("home/.ssh/id_ed25519"), "FAKE KEY").unwrap();
        write_probe(&case.home().join("plugins/probe"), &python);
        case.configure(plugins);
        Some(case)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    fn home(&self) -> PathBuf {
        self.path("home/.plughost")
    }

    fn configure(&self, plugins: Value) {
        let mut doc = json!({"plugins": {"enabled": ["probe"], "disabled": []}});
        for (k, v) in plugins.as_object().into_iter().flatten() {
            doc["plugins"][k] = v.clone();
        }
        std::fs::write(self.home().join("config.json"), doc.to_string()).unwrap();
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .current_dir(self.root.path())
            .env("HOME", self.path("home"))
            .env("TMPDIR", self.path("tmp"))
            .env("PLUGHOST_HOME", self.home())
            .env("PLUGHOST_BUNDLED_DIR", self.path("bundled"))
            .env("XDG_CACHE_HOME", self.path("home/.cache"))
            .env_remove("PLUGHOST_LOG")
            .env_remove("PYTHONPATH")
            .stdin(Stdio::null());
        cmd
    }

    /// `tools call TOOL` with `flags` first: its answer.
    fn call(&self, flags: &[&str], tool: &str, args: Value) -> String {
        let args = args.to_string();
        let mut all = flags.to_vec();
        all.extend(["tools", "call", tool, "--args", &args]);
        let out = run_bounded(self.command(&all), LIMIT);
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            !text.is_empty(),
            "{tool}: no answer; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// `tools call mcp_probe_files` with `flags` first: its answer.
    fn files(&self, flags: &[&str]) -> Value {
        let text = self.call(flags, "mcp_probe_files", json!({}));
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
    }
}

#[test]
fn an_isolated_bundles_mcp_server_is_confined_as_its_worker() {
    require_kernel();
    let Some(case) = Case::new(json!({})) else {
        return;
    };
    let confined = case.files(&["--isolate", "all"]);
    assert_eq!(
        confined,
        json!({"ssh_key": "PermissionError", "own_file": "ok", "data_dir": "ok",
               "outside": "PermissionError"})
    );
    // Its sandbox switched off: isolated, the server runs unconfined.
    case.configure(json!({"entries": {"probe": {"sandbox": false}}}));
    let open = case.files(&["--isolate", "all"]);
    assert_eq!(open["ssh_key"], "ok", "{open}");
    // read adds a path for the server too.
    case.configure(json!({"entries": {"probe": {"sandbox": {"read": [case.path("home/.ssh")]}}}}));
    let widened = case.files(&["--isolate", "all"]);
    assert_eq!(widened["ssh_key"], "ok", "{widened}");
    assert_eq!(widened["outside"], "PermissionError", "{widened}");
    // Trusted, in-process: unconfined, so each denial above is the sandbox's.
    case.configure(json!({"trusted": ["probe"]}));
    let trusted = case.files(&[]);
    assert_eq!(trusted["ssh_key"], "ok", "{trusted}");
    assert_eq!(trusted["outside"], "ok", "{trusted}");
}

#[test]
fn an_isolated_bundles_mcp_server_gets_its_plugins_network_rule() {
    require_kernel();
    let Some(case) = Case::new(json!({})) else {
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let isolated = ["--isolate", "all"];
    let connect =
        |case: &Case, flags: &[&str]| case.call(flags, "mcp_probe_connect", json!({"port": port}));
    assert_eq!(connect(&case, &isolated), "ok");
    case.configure(json!({"entries": {"probe": {"sandbox": {"network": "none"}}}}));
    assert_eq!(connect(&case, &isolated), "ConnectionRefusedError");
    case.configure(
        json!({"trusted": ["probe"], "entries": {"probe": {"sandbox": {"network": "none"}}}}),
    );
    assert_eq!(connect(&case, &[]), "ok");
    drop(listener);
}

const SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: mcp_probe_files
        args: {}
  - say: "context [{user_message}] files {tool_results}"
"#;

/// One chat completion through `plughost serve` with `flags`: the reply.
async fn serve_reply(case: &Case, flags: &[&str]) -> String {
    let script = case.path("script.yaml");
    std::fs::write(&script, SCRIPT).unwrap();
    let mut args = flags.to_vec();
    args.extend(["serve", "--port", "0", "--model", "scripted", "--script"]);
    let child = case
        .command(&args)
        .arg(&script)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, body) = crate::common::chat_once(child, "go").await;
    assert_eq!(status, 200, "{body:#}");
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_serve_an_isolated_bundle_offers_its_confined_mcp_tools_and_session_context() {
    require_kernel();
    let Some(case) = Case::new(json!({})) else {
        return;
    };
    let ssh_denied = r#""ssh_key": "PermissionError""#;
    for flags in [&[][..], &["--isolate", "all"][..]] {
        let reply = serve_reply(&case, flags).await;
        assert!(
            reply.starts_with("context [project rules: its own]"),
            "{flags:?}: {reply}"
        );
        assert!(reply.contains(ssh_denied), "{flags:?}: {reply}");
        assert!(reply.contains(r#""own_file": "ok""#), "{flags:?}: {reply}");
    }
    // Trusted (in-process): the same context, and the key is read.
    case.configure(json!({"trusted": ["probe"]}));
    let reply = serve_reply(&case, &[]).await;
    assert!(
        reply.starts_with("context [project rules: its own]"),
        "{reply}"
    );
    assert!(reply.contains(r#""ssh_key": "ok""#), "{reply}");
}
