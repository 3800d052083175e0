//! The server side of Felix plugins. Their `cron_tasks`
//! (`PluginCronTask(name, run)`, Felix's own shape): run now by `plughost
//! cron run plugin_<name>`, listed by `cron list` and `plugins doctor`, and
//! run on their timer by `plughost serve` — never twice at once, a failing
//! one counted in `/metrics` while the server goes on. Their audit and
//! usage sinks: a row per tool call in Felix's shape, `policy_deny` for a
//! hook's block, token counts per model call; a raising sink fails nothing.
use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A Felix plugin in the shape of felix-run/felix's example plugin: a
/// plugin object whose `cron_tasks` property lists `PluginCronTask`s.
const PLUGIN: &str = r#"
import asyncio, os
from felix.plugins import PluginCronTask

LOG = os.path.join(os.environ["PLUGHOST_HOME_FOR_TEST"], "cron.log")

def note(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")

async def tick():
    note("tick-start")
    # Longer than the test's period: the next tick finds it running.
    await asyncio.sleep(float(os.environ.get("CRON_NAP", "0")))
    note("tick-end")

async def broken():
    raise RuntimeError("the job failed")

class Plugin:
    name = "ticker"

    def register_tools(self, register):
        pass

    @property
    def cron_tasks(self):
        return (PluginCronTask(name="tick", run=tick), PluginCronTask(name="broken", run=broken))

def register(registry):
    registry.register_plugin(Plugin())
"#;

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

/// A trusted home with one Felix source tree `plugins/felix-<key>`:
/// `pyproject.toml` declaring the `felix.plugins` entry point `<key>` and
/// `src/felix_<key>/__init__.py` holding `code`.
fn felix_env(key: &str, code: &str) -> Env {
    let home = common::trusted_home(&[key]);
    common::felix_tree(home.path(), key, code);
    Env {
        home,
        bundled: common::no_bundled(),
    }
}

fn env() -> Env {
    felix_env("ticker", PLUGIN)
}

impl Env {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.arg("--home")
            .arg(self.home.path())
            .args(args)
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("PLUGHOST_HOME_FOR_TEST", self.home.path())
            .env_remove("PLUGHOST_LOG")
            .env_remove("PYTHONPATH")
            .env_remove("PLUGHOST_API_KEY");
        cmd
    }
    fn run(&self, args: &[&str]) -> Output {
        common::run_bounded(self.command(args), Duration::from_secs(60))
    }
    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
    fn log_path(&self) -> PathBuf {
        self.home.path().join("cron.log")
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn cron_run_runs_one_task_now_and_reports_a_failing_one() {
    let env = env();
    let out = env.run(&["cron", "list", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["plugin_tick", "plugin_broken"]);
    assert_eq!(list[0]["plugin"], "ticker");
    assert_eq!(
        list[0]["every_seconds"], 60.0,
        "Felix runs them once a minute"
    );

    let out = env.run(&["cron", "run", "plugin_tick"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "plugin_tick: done");
    assert_eq!(env.log(), "tick-start\ntick-end\n");

    let out = env.run(&["cron", "run", "plugin_broken"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("scheduled task 'plugin_broken' of 'ticker' failed: the job failed")
            && err.contains("Traceback"),
        "{err}"
    );

    let out = env.run(&["cron", "run", "tick"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("no scheduled task 'tick'; the loaded ones are: plugin_tick, plugin_broken"),
        "{err}"
    );

    let out = env.run(&["plugins", "doctor"]);
    let report = text(&out.stdout);
    assert!(
        report.contains("scheduled task plugin_tick: every 60 s under plughost serve; 0 runs"),
        "{report}"
    );
}

struct Server {
    child: Child,
    url: String,
    /// Standard error, line by line, after the address line.
    lines: std::sync::mpsc::Receiver<String>,
    /// Standard error before the address line.
    early: Vec<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(env: &Env, nap: &str) -> Server {
    let mut cmd = env.command(&[
        "serve",
        "--port",
        "0",
        "--model",
        "scripted",
        "--cron-every",
        "0.2",
    ]);
    cmd.env("CRON_NAP", nap);
    start(cmd)
}

/// Start `plughost serve` and wait for its address.
fn start(mut cmd: Command) -> Server {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    // Owned by the Server from here on: dropped, it kills and reaps the child.
    let mut server = Server {
        child,
        url: String::new(),
        lines: rx,
        early: Vec::new(),
    };
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.url.is_empty() {
        let line = server
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("plughost serve printed its address");
        if let Some(rest) = line.split("listening on ").nth(1) {
            server.url = rest.split_whitespace().next().unwrap().to_string();
        } else {
            server.early.push(line);
        }
    }
    server
}

fn metrics(server: &Server) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        reqwest::get(format!("{}/metrics", server.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    })
}

fn series(metrics: &str, prefix: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn count(log: &Path, what: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == what)
        .count()
}

#[test]
fn serve_runs_tasks_on_their_timer_never_twice_at_once() {
    let env = env();
    // Each run naps 0.5 s; ticks come every 0.2 s.
    let server = serve(&env, "0.5");
    common::wait_until("three runs of plugin_tick", Duration::from_secs(60), || {
        count(&env.log_path(), "tick-end") >= 3
    });
    let log = env.log();
    // Never two at once: every start is followed by its end before the next start.
    let events: Vec<&str> = log.lines().collect();
    for pair in events.chunks(2) {
        if pair.len() == 2 {
            assert_eq!(pair, ["tick-start", "tick-end"], "{log}");
        }
    }
    let m = metrics(&server);
    assert!(
        series(&m, "plughost_scheduled_skipped_total{task=\"plugin_tick\"") >= 1,
        "ticks during a run are skipped and counted:\n{m}"
    );
    assert!(
        series(&m, "plughost_scheduled_runs_total{task=\"plugin_broken\",plugin=\"ticker\",result=\"failed\"}") >= 1,
        "{m}"
    );
    assert!(
        series(
            &m,
            "plughost_scheduled_runs_total{task=\"plugin_tick\",plugin=\"ticker\",result=\"ok\"}"
        ) >= 2,
        "{m}"
    );
    // The failing task did not stop the server: it still answers.
    assert!(metrics(&server).contains("plughost_http_requests_total"));
}

/// Felix sinks in the shape Felix calls them: the audit sink's factory is
/// called once and its `record(event)` gets every row; the usage sink's
/// factory gets the settings and its `record(...)` keyword arguments.
const SINKS: &str = r#"
import json, os
from felix.tools.types import define_tool

LOG = os.path.join(os.environ["PLUGHOST_HOME_FOR_TEST"], "sinks.log")

def note(kind, value):
    with open(LOG, "a") as f:
        f.write(json.dumps({"kind": kind, "value": value}) + "\n")

BUILT = []

class Audit:
    def __init__(self):
        BUILT.append(1)
        note("built", len(BUILT))

    def record(self, event):
        note("audit", event)
        if event["payload_json"].get("tool") == "sinks__boom_audit":
            raise RuntimeError("the audit sink broke")

class Usage:
    def record(self, *, tenant_id, manifest_id, model_id, usage):
        note("usage", {"tenant_id": tenant_id, "manifest_id": manifest_id, "model_id": model_id,
                       "input": usage.input, "output": usage.output})

def _echo():
    async def handler(args, ctx=None):
        return "echoed"
    return define_tool(name="sinks__echo", description="echo", handler=handler)

def _forbidden():
    async def handler(args, ctx=None):
        return "unreachable"
    return define_tool(name="sinks__forbidden", description="blocked", handler=handler)

def _boom_audit():
    async def handler(args, ctx=None):
        return "fine"
    return define_tool(name="sinks__boom_audit", description="its audit row makes the sink raise", handler=handler)

class Plugin:
    name = "sinks"
    def register_tools(self, register):
        register("sinks__echo", _echo)
        register("sinks__forbidden", _forbidden)
        register("sinks__boom_audit", _boom_audit)

async def before_tool(tool_call, ctx):
    if tool_call["name"] == "sinks__forbidden":
        return {"block": True, "reason": "not this one"}
    return None

def register(registry):
    registry.register_plugin(Plugin())
    registry.register_before_tool(before_tool)
    registry.register_audit_sink(Audit)
    registry.register_usage_sink(lambda settings: Usage())
"#;

#[test]
fn audit_and_usage_sinks_see_every_call_and_never_fail_one() {
    let env = felix_env("sinks", SINKS);
    let script = env.home.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - say: \"calling\"\n    usage: {prompt_tokens: 11, completion_tokens: 7}\n    tool_calls:\n      - name: sinks__echo\n        args: {}\n      - name: sinks__forbidden\n        args: {}\n      - name: sinks__boom_audit\n        args: {}\n  - say: \"Done: {tool_results}\"\n",
    )
    .unwrap();
    let out = env.run(&[
        "run",
        "--json",
        "--model",
        "scripted",
        "--script",
        script.to_str().unwrap(),
        "go",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results: Vec<&str> = report["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["result"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        results,
        ["echoed", "[error/blocked] not this one", "fine"],
        "a raising sink fails no call"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("Felix plugin 'sinks': its audit sink failed: the audit sink broke")
            && err.contains("Traceback"),
        "{err}"
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(env.home.path().join("sinks.log"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |kind: &str| -> Vec<&serde_json::Value> {
        lines
            .iter()
            .filter(|l| l["kind"] == kind)
            .map(|l| &l["value"])
            .collect()
    };
    assert_eq!(of("built").len(), 1, "the audit sink is built once");
    let audit = of("audit");
    // The batch's calls run at once: rows come in the order they finish.
    let mut rows: Vec<(&str, &str, &str)> = audit
        .iter()
        .map(|r| {
            (
                r["event_type"].as_str().unwrap(),
                r["status"].as_str().unwrap(),
                r["payload_json"]["tool"].as_str().unwrap(),
            )
        })
        .collect();
    rows.sort_by_key(|r| r.2);
    assert_eq!(
        rows,
        [
            ("tool_call", "ok", "sinks__boom_audit"),
            ("tool_call", "ok", "sinks__echo"),
            ("policy_deny", "denied", "sinks__forbidden"),
        ]
    );
    let deny = audit
        .iter()
        .find(|r| r["event_type"] == "policy_deny")
        .unwrap();
    assert_eq!(deny["payload_json"]["control"], "hook");
    assert_eq!(
        deny["payload_json"]["hook"], "felix_sinks.before_tool",
        "the row names the hook that blocked (module.qualname): {deny}"
    );
    assert!(
        !deny.to_string().contains("not this one"),
        "the reason goes to the model, not into the row: {deny}"
    );
    for key in ["tenant_id", "id", "ts", "manifest_id", "principal_subj"] {
        assert!(audit[0].get(key).is_some(), "{key} in {}", audit[0]);
    }
    assert_eq!(audit[0]["manifest_id"], "main");
    let usage = of("usage");
    assert_eq!(
        usage.len(),
        1,
        "one row per model call that reported usage: {usage:?}"
    );
    assert_eq!(usage[0]["input"], 11);
    assert_eq!(usage[0]["output"], 7);
    assert_eq!(usage[0]["model_id"], "scripted");
}

/// A Felix plugin with routes, in the shape of felix-run/felix's example
/// plugin: `routes(app, *, tools)` adds an `APIRouter` to the FastAPI app,
/// `self_authenticating_mounts` and `body_limit_bytes` are properties.
const ROUTES: &str = r#"
import asyncio, os
LOG = os.path.join(os.environ["PLUGHOST_HOME_FOR_TEST"], "web.log")

def note(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")

class Web:
    name = "web"

    def register_tools(self, register):
        pass

    def routes(self, app, *, tools):
        from fastapi import APIRouter, Request
        from fastapi.responses import StreamingResponse

        router = APIRouter()

        @router.get("/web/ping")
        async def ping():
            return {"plugin": "web", "status": "ok"}

        @router.post("/web/echo")
        async def echo(request: Request):
            body = await request.body()
            return {"len": len(body), "query": dict(request.query_params)}

        @router.get("/web/stream")
        async def stream():
            async def chunks():
                for i in range(3):
                    yield f"chunk {i}\n"
                    await asyncio.sleep(0.01)
            return StreamingResponse(chunks(), media_type="text/plain")

        @router.get("/web/boom")
        async def boom():
            raise RuntimeError("the route broke")

        @router.post("/hooks/incoming")
        async def incoming():
            return {"open": True}

        app.include_router(router)
        app.router.on_startup.append(lambda: note("startup"))
        app.router.on_shutdown.append(lambda: note("shutdown"))

    @property
    def self_authenticating_mounts(self):
        return ("/hooks",)

    @property
    def body_limit_bytes(self):
        return 3_000_000

def register(registry):
    registry.register_plugin(Web())
"#;

fn routes_env() -> Env {
    felix_env("web", ROUTES)
}

fn sigterm(child: &Child) {
    // SAFETY: sends a signal to our own child process by its id; no memory is involved.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0);
}

#[test]
fn plugin_routes_answer_beside_plughost_endpoints_under_its_key() {
    common::require_fastapi();
    let env = routes_env();
    let mut cmd = env.command(&[
        "serve",
        "--port",
        "0",
        "--model",
        "scripted",
        "--api-key",
        "k1",
        "--max-body-bytes",
        "1024",
    ]);
    cmd.env("PLUGHOST_HOME_FOR_TEST", env.home.path());
    let mut server = start(cmd);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::new();
    let url = server.url.clone();
    rt.block_on(async {
        let get = |path: &str, key: bool| {
            let r = client.get(format!("{url}{path}"));
            if key {
                r.bearer_auth("k1")
            } else {
                r
            }
        };
        let ping = get("/web/ping", true).send().await.unwrap();
        assert_eq!(ping.status(), 200);
        assert_eq!(
            ping.json::<serde_json::Value>().await.unwrap(),
            serde_json::json!({"plugin": "web", "status": "ok"})
        );
        let refused = get("/web/ping", false).send().await.unwrap();
        assert_eq!(
            refused.status(),
            401,
            "plugin routes are under plughost's key"
        );
        // The plugin's body limit raises the server's 1 KiB one.
        let big = vec![b'x'; 100_000];
        // A connection of its own: once, under load, the pooled connection
        // the 401 above came on was gone when this body was written
        // (BrokenPipe); see the closing note of phase 7.
        let echo = reqwest::Client::new()
            .post(format!("{url}/web/echo?a=1"))
            .bearer_auth("k1")
            .body(big)
            .send()
            .await
            .unwrap();
        assert_eq!(echo.status(), 200);
        assert_eq!(
            echo.json::<serde_json::Value>().await.unwrap(),
            serde_json::json!({"len": 100_000, "query": {"a": "1"}})
        );
        // Its own connection: refused by its Content-Length before the
        // route runs; the server throws the body away as it comes, so the
        // client, still sending it, reads the 413 (no broken pipe).
        let too_big = reqwest::Client::new()
            .post(format!("{url}/web/echo"))
            .bearer_auth("k1")
            .body(vec![b'x'; 4_000_000])
            .send()
            .await
            .unwrap();
        assert_eq!(too_big.status(), 413);
        let mut stream = get("/web/stream", true).send().await.unwrap();
        let mut chunks = Vec::new();
        while let Some(chunk) = stream.chunk().await.unwrap() {
            chunks.push(String::from_utf8(chunk.to_vec()).unwrap());
        }
        assert_eq!(chunks.concat(), "chunk 0\nchunk 1\nchunk 2\n");
        let boom = get("/web/boom", true).send().await.unwrap();
        assert_eq!(boom.status(), 500);
        let open = client
            .post(format!("{url}/hooks/incoming"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            open.status(),
            200,
            "a self-authenticating mount needs no key"
        );
        let closed = client
            .post(format!("{url}/v1/chat/completions"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            closed.status(),
            401,
            "plughost's own endpoints keep their key"
        );
        let missing = get("/nowhere", true).send().await.unwrap();
        assert_eq!(missing.status(), 404);
        let health = get("/healthz", false).send().await.unwrap();
        assert_eq!(health.status(), 200);
    });
    sigterm(&server.child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "plughost serve did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = std::fs::read_to_string(env.home.path().join("web.log")).unwrap_or_default();
    assert_eq!(
        log, "startup\nshutdown\n",
        "the app's lifespan ran once each way"
    );
    let err: Vec<String> = server.lines.try_iter().collect();
    assert!(
        err.iter()
            .any(|l| l.contains("a plugin route raised after it answered: the route broke")),
        "{err:?}"
    );
}

#[test]
fn routes_without_fastapi_are_reported_and_the_server_serves_the_rest() {
    let env = routes_env();
    // A `fastapi` that cannot be imported, first on the path.
    let fake = env.home.path().join("nofastapi");
    std::fs::create_dir_all(fake.join("fastapi")).unwrap();
    std::fs::write(
        fake.join("fastapi").join("__init__.py"),
        "raise ImportError('no FastAPI here')\n",
    )
    .unwrap();
    let mut cmd = env.command(&["serve", "--port", "0", "--model", "scripted"]);
    cmd.env("PYTHONPATH", &fake);
    let server = start(cmd);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let models = reqwest::get(format!("{}/v1/models", server.url))
            .await
            .unwrap();
        assert_eq!(models.status(), 200);
        let ping = reqwest::get(format!("{}/web/ping", server.url))
            .await
            .unwrap();
        assert_eq!(ping.status(), 404);
    });
    let err = server.early.join("\n");
    assert!(
        err.contains("the HTTP routes of 'web' are not mounted")
            && err.contains("pip install fastapi"),
        "{err}"
    );
}

const AUTH: &str = r#"
from felix.auth.context import AuthContext, Principal

class HeaderAuth:
    async def authenticate(self, request):
        token = request.headers.get("x-token")
        if token == "raise":
            raise RuntimeError("the authenticator broke")
        if token != "good":
            from starlette.responses import JSONResponse
            return JSONResponse({"error": "unauthorized", "reason": "bad_token"}, status_code=401)
        return AuthContext(principal=Principal(subject="ada", tenant_id="acme", scheme="header"))

def register(registry):
    registry.register_authenticator("header", lambda settings: HeaderAuth())
"#;

#[test]
fn a_plugin_auth_mode_judges_every_request_under_serve_auth() {
    common::require_fastapi();
    let env = felix_env("auth", AUTH);
    let out = env.run(&["serve", "--port", "0", "--auth", "nosuch"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "--auth nosuch: no such auth mode; the modes are api_key, header (plugin auth)"
        ),
        "{err}"
    );

    let server = start(env.command(&[
        "serve", "--port", "0", "--model", "scripted", "--auth", "header",
    ]));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = server.url.clone();
    rt.block_on(async {
        let client = reqwest::Client::new();
        let models = |token: Option<&'static str>| {
            let r = client.get(format!("{url}/v1/models"));
            match token {
                Some(t) => r.header("x-token", t),
                None => r,
            }
        };
        assert_eq!(models(Some("good")).send().await.unwrap().status(), 200);
        let refused = models(Some("bad")).send().await.unwrap();
        assert_eq!(refused.status(), 401);
        assert_eq!(
            refused.json::<serde_json::Value>().await.unwrap(),
            serde_json::json!({"error": "unauthorized", "reason": "bad_token"}),
            "the plugin's own answer"
        );
        let broke = models(Some("raise")).send().await.unwrap();
        assert_eq!(broke.status(), 401, "an authenticator that fails refuses");
        assert_eq!(
            broke.json::<serde_json::Value>().await.unwrap(),
            serde_json::json!({"error": "unauthorized", "reason": "authenticator_error"})
        );
        assert_eq!(models(None).send().await.unwrap().status(), 401);
        let health = client.get(format!("{url}/healthz")).send().await.unwrap();
        assert_eq!(health.status(), 200, "probes stay open");
    });
}

/// A Codumentor plugin gating scheduled runs as the seed says: patch
/// `skip`/`skip_reason` into the run descriptor; told when a task is
/// auto-disabled.
const GATE: &str = r#"
import json, os

LOG = os.path.join(os.environ["PLUGHOST_HOME_FOR_TEST"], "gate.log")

def note(kind, payload):
    with open(LOG, "a") as f:
        f.write(json.dumps({"kind": kind, "payload": payload}) + "\n")

class Gate:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onScheduledRunGate", self.gate)
        bus.on("onScheduledRunAutoDisabled", self.disabled)

    async def gate(self, agent, ctx, payload):
        note("gate", payload)
        if payload["name"] == "plugin_tick":
            return {"type": "continue", "patch": {"skip": True, "skip_reason": "paused by the gate"}}
        return None

    async def disabled(self, agent, ctx, payload):
        note("disabled", payload)
        return None
"#;

#[test]
fn codumentor_gates_scheduled_runs_and_hears_of_auto_disabled_ones() {
    let env = env();
    let gate = env.home.path().join("plugins").join("gate");
    std::fs::create_dir_all(gate.join("backend").join("gate_pkg")).unwrap();
    std::fs::write(
        gate.join("plugin.yaml"),
        "name: gate\ndialect: codumentor\nentry: gate_pkg:Gate\n",
    )
    .unwrap();
    std::fs::write(
        gate.join("backend").join("gate_pkg").join("__init__.py"),
        GATE,
    )
    .unwrap();
    std::fs::write(
        env.home.path().join("config.json"),
        serde_json::json!({"plugins": {"enabled": ["ticker", "gate"], "disabled": [], "trusted": ["ticker", "gate"]}}).to_string(),
    )
    .unwrap();
    let out = env.run(&["cron", "run", "plugin_tick"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "plugin_tick: skipped (paused by the gate)"
    );
    assert_eq!(env.log(), "", "a skipped run does not run");

    // Under serve, the failing task is disabled after 5 failures in a row.
    let server = serve(&env, "0");
    let log = env.home.path().join("gate.log");
    common::wait_until("the auto-disabled notice", Duration::from_secs(60), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("\"disabled\"")
    });
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let disabled: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["kind"] == "disabled").collect();
    assert_eq!(disabled.len(), 1, "{lines:?}");
    assert_eq!(disabled[0]["payload"]["name"], "plugin_broken");
    assert_eq!(disabled[0]["payload"]["consecutive_failures"], 5);
    let m = metrics(&server);
    assert!(
        series(&m, "plughost_scheduled_runs_total{task=\"plugin_broken\",plugin=\"ticker\",result=\"failed\"}") == 5,
        "no run after it was disabled:\n{m}"
    );
    assert_eq!(
        count(&env.log_path(), "tick-end"),
        0,
        "the gate skips every tick run"
    );
}

/// `plughost cron run NAME` against a running server runs the task in the
/// server, beside its timer: a second one while the first runs is refused,
/// so the task never runs twice at once.
#[test]
fn cron_run_against_a_running_server_never_runs_twice_at_once() {
    let env = env();
    let mut cmd = env.command(&[
        "serve",
        "--port",
        "0",
        "--model",
        "scripted",
        "--cron-every",
        "3600",
    ]);
    cmd.env("CRON_NAP", "3");
    let _server = start(cmd);
    let first = env
        .command(&["cron", "run", "plugin_tick"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until("the first run", Duration::from_secs(30), || {
        env.log().contains("tick-start")
    });
    let second = env.run(&["cron", "run", "plugin_tick"]);
    assert!(
        !env.log().contains("tick-end"),
        "the second ran while the first was running"
    );
    assert_eq!(second.status.code(), Some(1));
    assert!(
        text(&second.stderr).contains("is running in the server now; not started twice"),
        "{}",
        text(&second.stderr)
    );
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert!(text(&first.stdout).contains("plugin_tick: done (in the running server)"));
    assert_eq!(env.log().matches("tick-start").count(), 1, "{}", env.log());
}
