//! Third-party plugins confined by the kernel (issue 50): a Flowly and a
//! Hermes plugin that reach for a fake key under `$HOME/.ssh`, their own
//! files, the workspace and outside it, loopback ports, an allowed and a
//! not-allowed host (loopback names standing in for both), memory past
//! `memory_mb` and a `setsid` child — under `mcp`'s defaults (those of
//! `serve`: third-party plugins isolated), with `--isolate all`, and
//! trusted (in-process), to show each denial comes from the confinement.
//!
//! Each case runs in a directory of its own that holds the user's home
//! (`HOME`, with `.ssh`), plughost's home inside it, and `TMPDIR`, so the
//! temp directory a plugin may write is not the parent of the rest.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{run_bounded, write_plugin};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(60);

/// The probes, shared by both plugins (each wraps them in its own API).
const PROBES: &str = r#"
import json, os, socket, subprocess, tempfile, urllib.request
HERE = os.path.dirname(os.path.abspath(__file__))

def _try(f):
    try:
        r = f()
        return "ok" if r is None else str(r)
    except BaseException as e:
        return type(e).__name__

def _read(path):
    with open(path) as f:
        f.read()

def _write(path):
    with open(path, "w") as f:
        f.write("x")

def files(data_dir, outside, other):
    ph = os.environ["PLUGHOST_HOME"]
    return json.dumps({
        "ssh_key": _try(lambda: _read(os.path.expanduser("~/.ssh/id_ed25519"))),
        "own_file": _try(lambda: _read(os.path.join(HERE, "__init__.py"))),
        "plughost_config": _try(lambda: _read(os.path.join(ph, "config.json"))),
        "other_plugin": _try(lambda: _read(other)),
        "workspace": _try(lambda: _write(os.path.join(ph, "workspace", "w.txt"))),
        "data_dir": _try(lambda: _write(os.path.join(data_dir, "d.txt"))),
        "temp": _try(lambda: tempfile.NamedTemporaryFile(dir=None).close()),
        "outside": _try(lambda: _write(os.path.join(outside, "x.txt"))),
    }, sort_keys=True)

def connect(port):
    return _try(lambda: socket.create_connection(("127.0.0.1", int(port)), timeout=5).close())

def fetch(url):
    def go():
        return urllib.request.urlopen(url, timeout=20).read().decode()
    try:
        return go()
    except urllib.error.HTTPError as e:
        return "HTTPError %d" % e.code
    except BaseException as e:
        return type(e).__name__

def hog(mb):
    try:
        block = bytearray(int(mb) << 20)
        return "allocated %d" % len(block)
    except MemoryError:
        return "MemoryError"

def unix():
    return _try(lambda: socket.socket(socket.AF_UNIX).close())

def sqlite_temp():
    # SQLite's temporary files go to /var/tmp before /tmp when TMPDIR is
    # unset (a public Hermes memory plugin's writes failed there).
    import sqlite3
    def go():
        db = sqlite3.connect(":memory:")
        db.execute("PRAGMA temp_store=FILE")
        db.execute("PRAGMA temp.cache_size=2")
        db.execute("CREATE TEMP TABLE t(x)")
        db.executemany("INSERT INTO t VALUES (?)", [("%0100d" % i,) for i in range(5000)])
        return db.execute("SELECT count(*) FROM t").fetchone()[0]
    return _try(go)

def which_hermes():
    import shutil
    found = shutil.which("hermes")
    if found is None:
        return "none"
    try:
        return str(subprocess.run([found, "--help"], capture_output=True, timeout=30).returncode)
    except BaseException as e:
        return "%s %s %s" % (type(e).__name__, e, found)

def detach(marker):
    p = subprocess.Popen(["/bin/sh", "-c", "sleep 300", marker], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return str(p.pid)
"#;

const FLOWLY: &str = r#"
def register(ctx):
    s = lambda *names: {"type": "object", "properties": {n: {"type": "string"} for n in names}}
    ctx.register_tool("f_files", s("data_dir", "outside", "other"), files)
    ctx.register_tool("f_connect", s("port"), connect)
    ctx.register_tool("f_fetch", s("url"), fetch)
    ctx.register_tool("f_hog", s("mb"), hog)
    ctx.register_tool("f_detach", s("marker"), detach)
    ctx.register_tool("f_echo", s("x"), lambda x="": x)
    ctx.register_tool("f_unix", s(), unix)
"#;

const HERMES: &str = r#"
from hermes_constants import get_hermes_home

def register(ctx):
    def tool(name, fn, *names):
        schema = {"name": name, "description": name, "parameters": {"type": "object", "properties": {n: {"type": "string"} for n in names}}}
        ctx.register_tool(name, "fence", schema, lambda args, **kw: fn(**args), description=name)
    tool("h_files", files, "data_dir", "outside", "other")
    tool("h_connect", connect, "port")
    tool("h_hermes_home", lambda: _try(lambda: _write(os.path.join(str(get_hermes_home()), "h.txt"))))
    tool("h_sqlite_temp", sqlite_temp)
    tool("h_which_hermes", which_hermes)
"#;

/// One case's directory: the user's home with a fake key, plughost's
/// home (a Flowly plugin `fence`, another plugin `other`), a Hermes home
/// (plugin `hfence`), `TMPDIR`, and a directory outside all of them.
struct Case {
    root: tempfile::TempDir,
}

impl Case {
    fn new(config: Value) -> Case {
        let case = Case {
            root: tempfile::tempdir().unwrap(),
        };
        for dir in ["home/.ssh", "tmp", "outside", "bundled"] {
            std::fs::create_dir_all(case.path(dir)).unwrap();
        }
        std::fs::write(case.path("home/.ssh/id_ed25519"), "FAKE KEY").unwrap();
        let plugins = case.path("home/.plughost/plugins");
        write_plugin(
            &plugins,
            "fence",
            "name: fence\nversion: 1.0\n",
            &[("__init__.py", &format!("{PROBES}\n{FLOWLY}"))],
        );
        write_plugin(
            &plugins,
            "other",
            "name: other\nversion: 1.0\n",
            &[
                ("__init__.py", "def register(ctx):\n    pass\n"),
                ("secret.txt", "theirs"),
            ],
        );
        write_plugin(
            &case.path("home/.hermes/plugins"),
            "hfence",
            "name: hfence\nversion: 1.0\n",
            &[("__init__.py", &format!("{PROBES}\n{HERMES}"))],
        );
        std::fs::write(
            case.path("home/.hermes/config.yaml"),
            "plugins:\n  enabled: [hfence]\n",
        )
        .unwrap();
        case.configure(config);
        case
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    fn home(&self) -> PathBuf {
        self.path("home/.plughost")
    }

    /// `config.json` with `plugins` merged over the enabled plugins.
    fn configure(&self, plugins: Value) {
        let mut doc = json!({"plugins": {"enabled": ["fence", "other"], "disabled": []}});
        if let (Some(base), Some(extra)) = (doc["plugins"].as_object_mut(), plugins.as_object()) {
            for (k, v) in extra {
                base.insert(k.clone(), v.clone());
            }
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
            .env("HERMES_HOME", self.path("home/.hermes"))
            .env("PLUGHOST_BUNDLED_DIR", self.path("bundled"))
            .env("XDG_CACHE_HOME", self.path("home/.cache"))
            .env_remove("PLUGHOST_LOG")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
            .env_remove("HERMES_SAFE_MODE")
            .stdin(Stdio::null());
        cmd
    }

    /// `tools call TOOL` with `extra` flags first (`--isolate all`): its
    /// output (the tool's answer).
    fn call(&self, extra: &[&str], tool: &str, args: Value) -> String {
        self.call_logged(extra, tool, args).0
    }

    /// [`Case::call`] with plughost's standard error (its log).
    fn call_logged(&self, extra: &[&str], tool: &str, args: Value) -> (String, String) {
        let args_text = args.to_string();
        let mut all: Vec<&str> = extra.to_vec();
        all.extend(["tools", "call", tool, "--args", &args_text]);
        let out = run_bounded(self.command(&all), LIMIT);
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!text.is_empty(), "{tool}: no answer; stderr: {log}");
        (text, log)
    }

    fn files_args(&self, data_dir: &Path) -> Value {
        json!({
            "data_dir": data_dir,
            "outside": self.path("outside"),
            "other": self.home().join("plugins/other/secret.txt"),
        })
    }
}

fn parsed(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| panic!("not JSON: {text}"))
}

/// Fails (never passes quietly) where the kernel lacks what is tested.
fn require_kernel() {
    let s = plughost::isolation::sandbox::support();
    let missing = s.missing();
    assert!(
        missing.is_empty(),
        "this test needs Landlock, network namespaces and a writable cgroup v2 (run as root or in a delegated cgroup); here plughost cannot enforce: {}",
        missing.join(", ")
    );
}

/// What the Flowly probe of files finds with these flags.
fn flowly_files(case: &Case, flags: &[&str]) -> Value {
    let args = case.files_args(&case.home().join("fence"));
    parsed(&case.call(flags, "f_files", args))
}

#[test]
fn by_default_a_confined_plugin_keeps_its_own_files_and_not_the_users_secrets() {
    require_kernel();
    let case = Case::new(json!({}));
    let confined = json!({
        "ssh_key": "PermissionError", "own_file": "ok", "plughost_config": "PermissionError",
        "other_plugin": "PermissionError", "workspace": "ok", "data_dir": "ok", "temp": "ok",
        "outside": "PermissionError"});
    let args = case.files_args(&case.home().join("fence"));
    let (found, log) = case.call_logged(&["--isolate", "all"], "f_files", args);
    assert_eq!(parsed(&found), confined);
    // Each denial is logged once, naming the rule and the setting.
    let key = case.path("home/.ssh/id_ed25519").canonicalize().unwrap();
    let said = format!("plugin 'fence' was denied reading {}", key.display());
    assert_eq!(log.matches(&said).count(), 1, "{log}");
    assert!(log.contains("plugins.entries.fence.sandbox.read"), "{log}");
    assert!(log.contains("plugins.entries.fence.sandbox.write"), "{log}");
    // Trusted, the same plugin runs in-process: every access succeeds,
    // so each denial above is the sandbox's.
    case.configure(json!({"trusted": ["fence", "other"]}));
    let everything = json!({
        "ssh_key": "ok", "own_file": "ok", "plughost_config": "ok", "other_plugin": "ok",
        "workspace": "ok", "data_dir": "ok", "temp": "ok", "outside": "ok"});
    assert_eq!(flowly_files(&case, &[]), everything);
    // "sandbox": false: isolated, unconfined.
    case.configure(json!({"entries": {"fence": {"sandbox": false}}}));
    assert_eq!(flowly_files(&case, &["--isolate", "all"]), everything);
    // read / write add paths.
    let outside = case.path("outside");
    case.configure(json!({"entries": {"fence": {"sandbox": {
        "read": [case.path("home/.ssh")], "write": [outside]}}}}));
    let widened = flowly_files(&case, &["--isolate", "all"]);
    assert_eq!(
        (widened["ssh_key"].as_str(), widened["outside"].as_str()),
        (Some("ok"), Some("ok")),
        "{widened}"
    );
    assert_eq!(widened["plughost_config"], "PermissionError", "{widened}");
}

#[test]
fn a_hermes_plugin_writes_the_hermes_home_and_nothing_of_the_users() {
    require_kernel();
    let case = Case::new(json!({}));
    let data = case.home().join("hfence");
    let args = case.files_args(&data);
    let found = parsed(&case.call(&["--isolate", "all"], "h_files", args.clone()));
    assert_eq!(found["ssh_key"], "PermissionError", "{found}");
    assert_eq!(found["plughost_config"], "PermissionError", "{found}");
    assert_eq!(found["outside"], "PermissionError", "{found}");
    assert_eq!(found["own_file"], "ok", "{found}");
    assert_eq!(found["workspace"], "ok", "{found}");
    assert_eq!(found["data_dir"], "ok", "{found}");
    assert_eq!(
        case.call(&["--isolate", "all"], "h_hermes_home", json!({})),
        "ok"
    );
    case.configure(json!({"trusted": ["hfence"]}));
    let trusted = parsed(&case.call(&[], "h_files", args));
    assert_eq!(trusted["ssh_key"], "ok", "{trusted}");
}

/// What a confined Hermes plugin finds of the usual places: SQLite's
/// temporary files (in `/var/tmp` with `TMPDIR` unset), and the `hermes`
/// command plughost puts on its `PATH` (written by plughost: the worker
/// may read it, not write it). Both found by the survey of public plugins.
#[test]
fn a_confined_hermes_plugin_has_the_temp_dirs_and_the_hermes_command() {
    require_kernel();
    let case = Case::new(json!({}));
    // With no TMPDIR at all (SQLite reads it once, when it starts).
    let mut cmd = case.command(&[
        "--isolate",
        "all",
        "tools",
        "call",
        "h_sqlite_temp",
        "--args",
        "{}",
    ]);
    cmd.env_remove("TMPDIR").env_remove("SQLITE_TMPDIR");
    let out = run_bounded(cmd, LIMIT);
    let (found, log) = (
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(found, "5000", "{log}");
    let (found, log) = case.call_logged(&["--isolate", "all"], "h_which_hermes", json!({}));
    assert_eq!(found, "0", "{log}");
    assert!(!log.contains("no `hermes` command"), "{log}");
}

#[test]
fn network_none_refuses_every_connection_loopback_included() {
    require_kernel();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            drop(c);
        }
    });
    let case = Case::new(json!({}));
    let isolated = ["--isolate", "all"];
    assert_eq!(
        case.call(&isolated, "f_connect", json!({"port": port})),
        "ok"
    );
    case.configure(json!({"entries": {"fence": {"sandbox": {"network": "none"}}}}));
    let (refused, log) = case.call_logged(&isolated, "f_connect", json!({"port": port}));
    assert_eq!(refused, "ConnectionRefusedError");
    assert!(
        log.contains(&format!("plugin 'fence' was refused a connection to ('127.0.0.1', {port}): its sandbox's network is none")),
        "{log}"
    );
    // The Hermes plugin has no such rule: it still connects.
    assert_eq!(
        case.call(&isolated, "h_connect", json!({"port": port})),
        "ok"
    );
    case.configure(
        json!({"trusted": ["fence"], "entries": {"fence": {"sandbox": {"network": "none"}}}}),
    );
    assert_eq!(case.call(&[], "f_connect", json!({"port": port})), "ok");
}

/// A one-line HTTP server on the loopback: answers `hello from PORT`.
fn http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let body = format!("hello from {port}");
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

#[test]
fn a_list_of_hosts_lets_the_plugin_reach_those_only_through_plughosts_proxy() {
    require_kernel();
    let (allowed, other) = (http_server(), http_server());
    let case = Case::new(json!({"entries": {"fence": {"sandbox": {
        "network": [format!("localhost:{allowed}")]}}}}));
    let isolated = ["--isolate", "all"];
    let fetch = |url: String| case.call(&isolated, "f_fetch", json!({"url": url}));
    assert_eq!(
        fetch(format!("http://localhost:{allowed}/")),
        format!("hello from {allowed}")
    );
    assert_eq!(fetch(format!("http://127.0.0.1:{other}/")), "HTTPError 403");
    assert_eq!(fetch(format!("http://localhost:{other}/")), "HTTPError 403");
    // Around the proxy, a direct connection finds nothing.
    assert_eq!(
        case.call(&isolated, "f_connect", json!({"port": allowed.to_string()})),
        "ConnectionRefusedError"
    );
    // Trusted, both answer.
    let config = json!({"trusted": ["fence"], "entries": {"fence": {"sandbox": {
        "network": [format!("localhost:{allowed}")]}}}});
    case.configure(config);
    assert_eq!(
        case.call(
            &[],
            "f_fetch",
            json!({"url": format!("http://127.0.0.1:{other}/")})
        ),
        format!("hello from {other}")
    );
}

#[test]
fn memory_past_memory_mb_is_a_memory_error() {
    require_kernel();
    let case = Case::new(json!({"entries": {"fence": {"sandbox": {"memory_mb": 128}}}}));
    let isolated = ["--isolate", "all"];
    assert_eq!(
        case.call(&isolated, "f_hog", json!({"mb": "16"})),
        "allocated 16777216"
    );
    assert_eq!(
        case.call(&isolated, "f_hog", json!({"mb": "512"})),
        "MemoryError"
    );
    case.configure(
        json!({"trusted": ["fence"], "entries": {"fence": {"sandbox": {"memory_mb": 128}}}}),
    );
    assert_eq!(
        case.call(&[], "f_hog", json!({"mb": "512"})),
        "allocated 536870912"
    );
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

fn wait_gone(pid: i32) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn a_setsid_child_ends_with_its_confined_worker() {
    require_kernel();
    let case = Case::new(json!({}));
    let isolated = ["--isolate", "all"];
    let pid: i32 = case
        .call(
            &isolated,
            "f_detach",
            json!({"marker": "plughost-sandbox-test"}),
        )
        .parse()
        .unwrap();
    assert!(wait_gone(pid), "the setsid child {pid} outlived its worker");
    // Unconfined (sandbox false), the worker's process group is all that
    // is killed, and the setsid child is not in it.
    case.configure(json!({"entries": {"fence": {"sandbox": false}}}));
    let pid: i32 = case
        .call(
            &isolated,
            "f_detach",
            json!({"marker": "plughost-sandbox-test"}),
        )
        .parse()
        .unwrap();
    let survived = !wait_gone(pid);
    // SAFETY: a signal to the test's own stray child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(survived, "without the sandbox the setsid child survives");
}

/// The MCP server on stdin/stdout (`plughost mcp`), whose defaults are
/// `serve`'s: a third-party plugin runs isolated, and so confined.
struct Mcp {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Mcp {
    fn start(case: &Case) -> Mcp {
        let mut child = case
            .command(&["mcp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut mcp = Mcp { child, lines };
        mcp.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}}),
        );
        mcp.answer(0);
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, message: Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    fn answer(&mut self, id: u64) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(LIMIT)
                .expect("plughost mcp answered");
            let v: Value = serde_json::from_str(&line).expect(&line);
            if v["id"] == id {
                return v;
            }
        }
    }

    /// The text of tool `tool`'s answer.
    fn call(&mut self, id: u64, tool: &str, args: Value) -> String {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}));
        let answer = self.answer(id);
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"))
            .to_string()
    }

    fn stop(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

#[test]
fn under_serves_defaults_a_third_party_plugin_is_confined_and_a_trusted_one_is_not() {
    require_kernel();
    let case = Case::new(json!({"entries": {"fence": {"sandbox": {"network": "none"}}}}));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let mut mcp = Mcp::start(&case);
    let found = parsed(&mcp.call(1, "f_files", case.files_args(&case.home().join("fence"))));
    assert_eq!(found["ssh_key"], "PermissionError", "{found}");
    assert_eq!(found["workspace"], "ok", "{found}");
    assert_eq!(
        mcp.call(2, "f_connect", json!({"port": port})),
        "ConnectionRefusedError"
    );
    let pid: i32 = mcp
        .call(3, "f_detach", json!({"marker": "plughost-sandbox-test"}))
        .parse()
        .unwrap();
    assert!(alive(pid), "the child runs while its worker does");
    mcp.stop();
    assert!(
        wait_gone(pid),
        "the setsid child {pid} outlived mcp's worker"
    );

    case.configure(json!({"trusted": ["fence", "other"], "entries": {"fence": {"sandbox": {"network": "none"}}}}));
    let mut mcp = Mcp::start(&case);
    let found = parsed(&mcp.call(1, "f_files", case.files_args(&case.home().join("fence"))));
    assert_eq!(found["ssh_key"], "ok", "{found}");
    assert_eq!(mcp.call(2, "f_connect", json!({"port": port})), "ok");
    mcp.stop();
    drop(listener);
}

#[test]
fn plugins_doctor_and_list_say_how_each_plugin_is_confined() {
    require_kernel();
    let case = Case::new(
        json!({"entries": {"fence": {"sandbox": {"network": "none", "memory_mb": 256}}}}),
    );
    let out = run_bounded(
        case.command(&["--isolate", "all", "plugins", "doctor"]),
        LIMIT,
    );
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = (&out.stderr[..]).read_to_string(&mut text);
    let line = text
        .lines()
        .find(|l| l.contains("sandbox:") && l.contains("network none"))
        .unwrap_or_else(|| panic!("no sandbox line for fence in:\n{text}"));
    assert!(line.contains("memory 256 MiB"), "{line}");
    assert!(line.contains("workspace"), "{line}");
}

/// Issue 50, item 5: a confined worker starts within 1.5× an unconfined
/// one, and a call to it costs what a call to an unconfined one does.
/// Medians of interleaved runs (this machine is shared): the starts
/// alternate, and the calls go in alternating batches to two hosts alive
/// at once. The figures are printed (`--nocapture`) for docs/security.md.
#[test]
fn a_confined_worker_starts_within_one_and_a_half_times_an_unconfined_one() {
    require_kernel();
    use plughost::isolation::WorkerCommand;
    use plughost::plugins::config::Isolation;
    let cases: Vec<Case> = (0..6).map(|_| Case::new(json!({}))).collect();
    // Case `i` (0..6) is confined when odd.
    let build = |i: usize| {
        let (case, sandbox) = (&cases[i], i % 2 == 1);
        let entry = if sandbox {
            json!({})
        } else {
            json!({"sandbox": false})
        };
        case.configure(json!({"enabled": ["fence"], "entries": {"fence": entry}}));
        let started = std::time::Instant::now();
        let host = plughost::Host::builder()
            .home(case.home())
            .bundled_dir(case.path("bundled"))
            .worker_command(WorkerCommand::binary(env!("CARGO_BIN_EXE_plughost")))
            .isolate(Isolation::All)
            .build()
            .unwrap();
        let took = started.elapsed();
        assert!(host.plugins()[0].loaded, "{:?}", host.plugins()[0]);
        (took, host)
    };
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let mut start = [Vec::new(), Vec::new()];
    for round in 0..9 {
        for i in [round % 2, 1 - round % 2] {
            start[i].push(build(i).0);
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Three hosts of each kind alive at once (one host's calls can be
    // steadily faster or slower than another's, confined or not).
    let hosts: Vec<plughost::Host> = (0..6).map(|i| build(i).1).collect();
    let batch = |host: &plughost::Host| {
        let n = 40;
        let started = std::time::Instant::now();
        for _ in 0..n {
            let r = rt.block_on(host.call_tool("f_echo", json!({"x": "y"}), ""));
            assert_eq!(r.text, "y");
        }
        started.elapsed() / n
    };
    let mut call = [Vec::new(), Vec::new()];
    for round in 0..12 {
        for i in 0..6 {
            let i = if round % 2 == 0 { i } else { 5 - i };
            call[i % 2].push(batch(&hosts[i]));
        }
    }
    let [s0, s1] = start.map(median);
    let [c0, c1] = call.map(median);
    let start_ratio = s1.as_secs_f64() / s0.as_secs_f64();
    let call_ratio = c1.as_secs_f64() / c0.as_secs_f64();
    println!(
        "worker start: unconfined {s0:?}, confined {s1:?} (ratio {start_ratio:.2}); a call: unconfined {c0:?}, confined {c1:?} (ratio {call_ratio:.2})"
    );
    assert!(
        start_ratio <= 1.5,
        "a confined worker starts in {start_ratio:.2}× the time of an unconfined one"
    );
    assert!(
        call_ratio <= 1.5,
        "a confined call takes {call_ratio:.2}× an unconfined one"
    );
}

#[test]
fn unix_sockets_are_refused_unless_the_plugin_is_allowed_them() {
    require_kernel();
    let case = Case::new(json!({}));
    let isolated = ["--isolate", "all"];
    assert_eq!(case.call(&isolated, "f_unix", json!({})), "PermissionError");
    case.configure(json!({"entries": {"fence": {"sandbox": {"unix_sockets": true}}}}));
    assert_eq!(case.call(&isolated, "f_unix", json!({})), "ok");
    case.configure(json!({"trusted": ["fence"]}));
    assert_eq!(case.call(&[], "f_unix", json!({})), "ok");
}
