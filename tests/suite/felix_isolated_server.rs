//! The server parts of an isolated Felix plugin (serve isolates third-party
//! plugins by default) run in its worker (issue 47 item 3): requests,
//! streamed uploads and streamed answers cross the worker protocol with
//! backpressure, a route handler's segfault ends its worker, not the
//! server, and its cron task runs there too. The server never imports it.
use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

const PLUGIN: &str = r#"
import asyncio
import ctypes
import os
from fastapi import Request
from fastapi.responses import StreamingResponse
from felix.plugins import PluginCronTask

HOME = os.environ["PLUGHOST_HOME_FOR_TEST"]
CHUNKS, CHUNK = 600, 64 * 1024

def note(line, log="events.log"):
    with open(os.path.join(HOME, log), "a") as f:
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

        @app.post("/iso/count")
        async def count(request: Request):
            seen = 0
            async for chunk in request.stream():
                seen += len(chunk)
            return {"bytes": seen}

        @app.get("/iso/stream")
        async def stream():
            async def chunks():
                for i in range(CHUNKS):
                    note(f"{i}", log="chunks.log")
                    yield b"x" * CHUNK
            return StreamingResponse(chunks(), media_type="application/octet-stream")

        @app.get("/iso/forever")
        async def forever():
            async def chunks():
                try:
                    while True:
                        await asyncio.sleep(0.05)
                        yield b"tick\n"
                finally:
                    note("forever closed")
            return StreamingResponse(chunks(), media_type="text/plain")

        @app.get("/iso/crash")
        def crash():
            ctypes.string_at(0)

    @property
    def cron_tasks(self):
        return (PluginCronTask(name="tick", run=tick),)

def register(registry):
    registry.register_plugin(Iso())
"#;

const CHUNKS: usize = 600;
const CHUNK: usize = 64 * 1024;

struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn pid_of(client: &reqwest::Client, url: &str) -> u64 {
    let r = client.get(format!("{url}/iso/pid")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json::<serde_json::Value>().await.unwrap()["pid"]
        .as_u64()
        .unwrap()
}

/// Lines of `chunks.log`: the chunks the route's generator made so far.
fn made(home: &std::path::Path) -> usize {
    std::fs::read_to_string(home.join("chunks.log"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn an_isolated_felix_plugins_routes_and_cron_task_run_in_its_worker_never_in_the_server() {
    common::require_fastapi();
    // Enabled, not trusted: serve runs it in a worker.
    let home = common::home_with(&["iso"]);
    common::felix_tree(home.path(), "iso", PLUGIN);
    let bundled = common::no_bundled();
    let child = Command::new(env!("CARGO_BIN_EXE_plughost"))
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
    let mut server = Server(child);
    let server_pid = u64::from(server.0.id());
    let (url, lines, early) = common::serve_lines(&mut server.0);
    std::thread::spawn(move || for _ in lines {});
    assert!(
        !early
            .iter()
            .any(|l| l.contains("cannot be served from a worker")),
        "{early:?}"
    );
    let client = reqwest::Client::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The route answers from the worker.
        let worker = pid_of(&client, &url).await;
        assert_ne!(worker, server_pid, "the route runs in the worker");

        // A streamed (chunked) upload reaches the handler whole.
        let pieces = (0..64).map(|_| Ok::<_, std::io::Error>(vec![7u8; 64 * 1024]));
        let body = reqwest::Body::wrap_stream(futures_util::stream::iter(pieces));
        let r = client
            .post(format!("{url}/iso/count"))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let counted = r.json::<serde_json::Value>().await.unwrap();
        assert_eq!(counted["bytes"], 64 * 64 * 1024, "{counted}");

        // A streamed answer the client does not read stalls its generator
        // (the chunks it made stop short of all of them), and goes on,
        // whole, as the client reads.
        let mut r = client
            .get(format!("{url}/iso/stream"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let mut last = 0;
        let mut still = 0;
        common::wait_until("the generator to stall", Duration::from_secs(60), || {
            let now = made(home.path());
            still = if now == last && now > 0 { still + 1 } else { 0 };
            last = now;
            std::thread::sleep(Duration::from_millis(50));
            still >= 10
        });
        assert!(last < CHUNKS, "made {last} of {CHUNKS} chunks unread");
        let mut got = 0;
        while let Some(chunk) = r.chunk().await.unwrap() {
            got += chunk.len();
        }
        assert_eq!(got, CHUNKS * CHUNK);
        assert_eq!(made(home.path()), CHUNKS);

        // A client that goes away mid-answer: the request is cancelled in
        // the worker, which closes the route's generator.
        let mut r = client
            .get(format!("{url}/iso/forever"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.chunk().await.unwrap().is_some(), "it streams");
        drop(r);
        let log = home.path().join("events.log");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("forever closed")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the generator was never closed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // A segfault in a handler ends the worker; the server answers 500
        // and the next request is served by a new worker.
        let r = client.get(format!("{url}/iso/crash")).send().await.unwrap();
        assert_eq!(r.status(), 500);
        let next = pid_of(&client, &url).await;
        assert_ne!(next, worker, "a new worker serves after the crash");
        assert_ne!(next, server_pid);
    });
    assert!(server.0.try_wait().unwrap().is_none(), "serve still runs");
    let events = || std::fs::read_to_string(home.path().join("events.log")).unwrap_or_default();
    common::wait_until("a tick", Duration::from_secs(20), || {
        events().contains("tick ")
    });
    let log = events();
    // Loaded by each worker (the first, the one after the crash), never
    // by the server; the task ticks in a worker.
    let loads: Vec<&str> = log.lines().filter(|l| l.starts_with("loaded ")).collect();
    assert!(
        !loads.contains(&format!("loaded {server_pid}").as_str()),
        "{log}"
    );
    assert!(loads.len() >= 2, "loaded in two workers: {log}");
    for tick in log.lines().filter_map(|l| l.strip_prefix("tick ")) {
        assert!(
            loads.contains(&format!("loaded {tick}").as_str()),
            "ticked in a worker: {log}"
        );
    }
}
