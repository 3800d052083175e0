//! A reload re-mounts what `plughost serve` takes from the plugins: a
//! changed Felix plugin's routes answer from a fresh FastAPI app while a
//! request in flight finishes on the old one, whose lifespan shutdown runs
//! only after that request ended; its cron task's timer is replaced by the
//! new version's; an auth mode that a new version drops is reported and
//! every request but `/healthz` is refused.
use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A Felix plugin (the shape of felix-run/felix's example plugin) with a
/// route, a slow route, a cron task and, when `auth`, an auth mode; every
/// event is a line in `events.log`, tagged with the version.
fn plugin(version: &str, auth: bool) -> String {
    format!(
        r#"
import asyncio, os
from felix.plugins import PluginCronTask
from felix.auth.context import AuthContext, Principal

V = "{version}"
HOME = os.environ["PLUGHOST_HOME_FOR_TEST"]

def note(line):
    with open(os.path.join(HOME, "events.log"), "a") as f:
        f.write(line + "\n")

async def tick():
    note(f"tick {{V}}")

class HeaderAuth:
    async def authenticate(self, request):
        if request.headers.get("x-token") != "good":
            from starlette.responses import JSONResponse
            return JSONResponse({{"error": "unauthorized", "reason": "bad_token"}}, status_code=401)
        return AuthContext(principal=Principal(subject="ada", tenant_id="acme", scheme="header"))

class Live:
    name = "live"

    def register_tools(self, register):
        pass

    def routes(self, app, *, tools):
        from fastapi import APIRouter
        router = APIRouter()

        @router.get("/live/version")
        async def version():
            return {{"version": V}}

        @router.get("/live/slow")
        async def slow():
            note(f"slow-start {{V}}")
            while not os.path.exists(os.path.join(HOME, "release")):
                await asyncio.sleep(0.02)
            note(f"slow-end {{V}}")
            return {{"version": V}}

        app.include_router(router)
        app.router.on_startup.append(lambda: note(f"startup {{V}}"))
        app.router.on_shutdown.append(lambda: note(f"shutdown {{V}}"))

    @property
    def cron_tasks(self):
        return (PluginCronTask(name="tick", run=tick),)

def register(registry):
    registry.register_plugin(Live())
    if {auth}:
        registry.register_authenticator("header", lambda settings: HeaderAuth())
"#,
        auth = if auth { "True" } else { "False" }
    )
}

/// A trusted home with the Felix source tree `plugins/felix-live`.
fn home() -> tempfile::TempDir {
    let home = common::trusted_home(&["live"]);
    common::felix_tree(home.path(), "live", "");
    write(home.path(), "v1", true);
    home
}

fn write(home: &Path, version: &str, auth: bool) {
    std::fs::write(
        home.join("plugins/felix-live/src/felix_live/__init__.py"),
        plugin(version, auth),
    )
    .unwrap();
}

fn events(home: &Path) -> Vec<String> {
    std::fs::read_to_string(home.join("events.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn has(home: &Path, line: &str) -> bool {
    events(home).iter().any(|l| l == line)
}

fn position(events: &[String], line: &str) -> usize {
    events
        .iter()
        .position(|l| l == line)
        .unwrap_or_else(|| panic!("no '{line}' in {events:?}"))
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_reload_remounts_routes_cron_and_auth_and_old_requests_finish_on_the_old_app() {
    common::require_fastapi();
    let home = home();
    let bundled = common::no_bundled();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home.path())
        .args(["serve", "--port", "0", "--model", "scripted"])
        .args(["--auth", "header", "--cron-every", "0.1"])
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("PLUGHOST_HOME_FOR_TEST", home.path())
        .env_remove("PLUGHOST_LOG")
        .env_remove("PYTHONPATH")
        .env_remove("PLUGHOST_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = common::serve_url(&mut child);
    let _server = Server(child);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let h = home.path().to_path_buf();
    rt.block_on(async move {
        let client = reqwest::Client::new();
        let get = |path: &str| client.get(format!("{url}{path}")).header("x-token", "good");
        let version = |body: serde_json::Value| body["version"].as_str().unwrap().to_string();
        let v = get("/live/version").send().await.unwrap();
        assert_eq!(v.status(), 200);
        assert_eq!(version(v.json().await.unwrap()), "v1");
        let wait = |line: &'static str| {
            let h = h.clone();
            common::wait_until(line, Duration::from_secs(20), || has(&h, line))
        };
        wait("tick v1");
        // A request in flight on v1's app.
        let slow = tokio::spawn(get("/live/slow").send());
        wait("slow-start v1");

        write(&h, "v2", true);
        let reload = |client: reqwest::Client, url: String| async move {
            let r = client
                .post(format!("{url}/admin/reload"))
                .header("x-token", "good")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.json::<serde_json::Value>().await.unwrap()
        };
        let report = reload(client.clone(), url.clone()).await;
        assert_eq!(report["changed"], serde_json::json!(["live"]), "{report}");
        assert_eq!(report["server"]["routes_remounted"], true, "{report}");
        assert_eq!(
            report["server"]["cron"],
            serde_json::json!({"started": ["plugin_tick"], "stopped": ["plugin_tick"]}),
            "{report}"
        );
        let v = get("/live/version").send().await.unwrap();
        assert_eq!(
            version(v.json().await.unwrap()),
            "v2",
            "new requests meet v2"
        );
        assert!(has(&h, "startup v2"));
        assert!(
            !has(&h, "shutdown v1"),
            "v1's app is not shut down while a request runs on it"
        );
        std::fs::write(h.join("release"), "").unwrap();
        let old = slow.await.unwrap().unwrap();
        assert_eq!(
            version(old.json().await.unwrap()),
            "v1",
            "it finished on v1"
        );
        wait("shutdown v1");
        wait("tick v2");
        let log = events(&h);
        assert!(position(&log, "slow-end v1") < position(&log, "shutdown v1"));
        let first_v2 = position(&log, "tick v2");
        assert!(
            !log[first_v2..].iter().any(|l| l == "tick v1"),
            "v1's timer stopped: {log:?}"
        );

        // v3 drops the auth mode the server was started with.
        write(&h, "v3", false);
        let report = reload(client.clone(), url.clone()).await;
        let warnings = report["server"]["warnings"].to_string();
        assert!(
            warnings.contains("auth mode 'header' (serve --auth header) is no longer registered"),
            "{report}"
        );
        let refused = get("/v1/models").send().await.unwrap();
        assert_eq!(refused.status(), 401);
        assert_eq!(
            refused.json::<serde_json::Value>().await.unwrap()["reason"],
            "auth_mode_unavailable"
        );
        let health = client.get(format!("{url}/healthz")).send().await.unwrap();
        assert_eq!(health.status(), 200, "probes stay open");
    });
}
