//! The peer of the start-up and crash figures: a bare Python subprocess of
//! the same interpreter (`python -c`, default flags) that imports the
//! plugin, runs its `register(ctx)` with a minimal context, and answers
//! tool calls over a length-prefixed JSON protocol on its stdin/stdout:
//! what a worker does, with none of plughost in it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const SCRIPT: &str = r#"
import importlib.util, json, os, struct, sys
rd = os.fdopen(0, "rb", buffering=0)
wr = os.fdopen(1, "wb", buffering=0)
def recv():
    head = rd.read(4)
    if len(head) < 4:
        sys.exit(0)
    n = struct.unpack(">I", head)[0]
    body = b""
    while len(body) < n:
        body += rd.read(n - len(body))
    return json.loads(body)
def send(obj):
    body = json.dumps(obj).encode()
    wr.write(struct.pack(">I", len(body)) + body)
tools, hooks = {}, []
class Ctx:
    def register_tool(self, name, schema, handler, **kw):
        tools[name] = handler
    def register_hook(self, event, callback, **kw):
        hooks.append((event, callback))
while True:
    m = recv()
    if m["op"] == "load":
        d = m["dir"]
        spec = importlib.util.spec_from_file_location(
            "bench", os.path.join(d, "__init__.py"), submodule_search_locations=[d])
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bench"] = mod
        spec.loader.exec_module(mod)
        mod.register(Ctx())
        send({"loaded": sorted(tools)})
    else:
        send({"result": tools[m["tool"]](**m["args"])})
"#;

/// The real interpreter behind `python3` (not a pyenv shim, whose shell
/// script would be timed too); `PLUGHOST_BENCH_PYTHON` overrides it.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("PLUGHOST_BENCH_PYTHON") {
        return p.into();
    }
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 on PATH");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

pub struct Peer {
    child: Child,
    input: ChildStdin,
    output: ChildStdout,
}

impl Peer {
    /// Start a peer and load the plugin at `dir`; the time until it said so.
    pub fn start(python: &Path, dir: &Path) -> (Peer, Duration) {
        let started = Instant::now();
        let mut child = Command::new(python)
            .args(["-c", SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the peer starts");
        let mut peer = Peer {
            input: child.stdin.take().unwrap(),
            output: child.stdout.take().unwrap(),
            child,
        };
        let loaded = peer
            .ask(&json!({"op": "load", "dir": dir}))
            .expect("the peer loads the plugin");
        assert!(loaded["loaded"].is_array());
        (peer, started.elapsed())
    }

    /// Send one message and read its answer (`None`: the peer is gone).
    pub fn ask(&mut self, message: &Value) -> Option<Value> {
        let body = serde_json::to_vec(message).unwrap();
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend(body);
        self.input.write_all(&frame).ok()?;
        let mut head = [0u8; 4];
        self.output.read_exact(&mut head).ok()?;
        let mut body = vec![0u8; u32::from_be_bytes(head) as usize];
        self.output.read_exact(&mut body).ok()?;
        serde_json::from_slice(&body).ok()
    }

    fn call(&mut self, tool: &str) -> Option<Value> {
        self.ask(&json!({"op": "call", "tool": tool, "args": {}}))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A started peer crashes in a call (`segv`); the time from seeing the
/// crash to the next successful call, through a new peer.
pub fn crash_and_recover(python: &Path, dir: &Path) -> Duration {
    let (mut peer, _) = Peer::start(python, dir);
    assert!(peer.call("segv").is_none(), "the peer crashed");
    let crashed = Instant::now();
    let _ = peer.child.wait();
    let (mut next, _) = Peer::start(python, dir);
    let answer = next.call("noop").expect("the new peer answers");
    assert_eq!(answer["result"], "ok");
    crashed.elapsed()
}

/// How long plughost takes to start a worker for the plugin at `dir` and
/// have it loaded (spawn, handshake, `register()`): the supervisor alone,
/// without the host around it.
pub fn time_worker_start(home: &Path, dir: &Path) -> Duration {
    use plughost::isolation::{load, LoadSpec, Settings, WorkerCommand};
    let spec = LoadSpec {
        key: "bench".into(),
        dir: dir.to_path_buf(),
        home: home.to_path_buf(),
        dialect: "flowly".into(),
        limits: Default::default(),
        guard: false,
        host: Default::default(),
    };
    let settings = Settings {
        command: WorkerCommand::current_exe().unwrap(),
        load_timeout: Duration::from_secs(10),
        breaker_crashes: 3,
        breaker_window: Duration::from_secs(60),
        python_log_level: 30,
    };
    let started = Instant::now();
    let (registrations, worker) = load(spec, settings).expect("the worker loads the plugin");
    let took = started.elapsed();
    assert!(!registrations.is_empty());
    drop(worker);
    took
}
