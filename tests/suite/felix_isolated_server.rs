//! The server parts of an isolated Felix plugin (serve isolates third-party
//! plugins by default): its worker announces its routes and cron task,
//! which the worker protocol cannot serve, and the host loads them
//! in-process (a second load of the plugin) with a warning, instead of
//! dropping them. The plugin's code ran in both processes.
use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const PLUGIN: &str = r#"
import os
from felix.plugins import PluginCronTask

HOME = os.environ["PLUGHOST_HOME_FOR_TEST"]

def note(line):
    with open(os.path.join(HOME, "events.log"), "a") as f:
        f.write(line + "\n")

note(f"loaded {os.getpid()}")

async def tick():
    note(f"tick {os.getpid()}")

class Iso:
    name = "iso"

    def register_tools(self, register):
        pass

    def routes(self, app, *, tools):
        @app.get("/iso/pid")
        async def pid():
            return {"pid": os.getpid()}

    @property
    def cron_tasks(self):
        return (PluginCronTask(name="tick", run=tick),)

def register(registry):
    registry.register_plugin(Iso())
"#;

#[test]
fn an_isolated_felix_plugins_routes_and_cron_task_run_in_process_with_a_warning() {
    common::require_fastapi();
    // Enabled, not trusted: serve runs it in a worker.
    let home = common::home_with(&["iso"]);
    common::felix_tree(home.path(), "iso", PLUGIN);
    let bundled = common::no_bundled();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home.path())
        .args([
            "serve",
            "--port",
            "0",
            "--model",
            "scripted",
            "--cron-every",
            "0.1",
        ])
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("PLUGHOST_HOME_FOR_TEST", home.path())
        .env_remove("PLUGHOST_LOG")
        .env_remove("PYTHONPATH")
        .env_remove("PLUGHOST_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let server_pid = child.id();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut early = Vec::new();
    let url = loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "serve ended: {early:?}"
        );
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
        early.push(line);
    };
    std::thread::spawn(move || for _ in stderr.lines() {});
    let warned = early.iter().any(|l| {
        l.contains("plugin 'iso' runs isolated, but its cron task plugin_tick, routes iso cannot be served from a worker")
    });
    let pid = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let r = reqwest::get(format!("{url}/iso/pid")).await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<serde_json::Value>().await.unwrap()["pid"]
                .as_u64()
                .unwrap()
        });
    let events = || std::fs::read_to_string(home.path().join("events.log")).unwrap_or_default();
    common::wait_until("a tick", Duration::from_secs(20), || {
        events().contains("tick ")
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(warned, "{early:?}");
    assert_eq!(pid, u64::from(server_pid), "the route runs in the server");
    let log = events();
    assert!(log.contains(&format!("tick {server_pid}")), "{log}");
    let loads: Vec<&str> = log.lines().filter(|l| l.starts_with("loaded ")).collect();
    assert_eq!(loads.len(), 2, "loaded in the worker and in-process: {log}");
    assert!(
        loads.contains(&format!("loaded {server_pid}").as_str()),
        "{log}"
    );
}
