//! `/v1/chat/completions` through HAProxy with 1 and 3 `plughost serve`
//! replicas, sessions in files (one shared home) against PostgreSQL
//! (`--sessions`): requests per second and p50/p99 latency, the scripted
//! model answering, 16 clients each on its own named session. One run:
//! `cargo bench --bench replicas` (release build). Skipped with a reason
//! where PostgreSQL or HAProxy is not installed.
#[path = "../tests/suite/common/mod.rs"]
mod common;
#[path = "../tests/suite/replicas_common/mod.rs"]
mod replicas_common;

use std::time::{Duration, Instant};

use replicas_common::{echo_script, haproxy, serve, Pg};
use serde_json::json;

const CLIENTS: usize = 16;
const PER_CLIENT: usize = 60;

struct Figures {
    rps: f64,
    p50: Duration,
    p99: Duration,
}

async fn load(url: &str, tag: &str) -> Figures {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (http, url, session) = (http.clone(), url.to_string(), format!("{tag}-{c}"));
        tasks.push(tokio::spawn(async move {
            let mut took = Vec::with_capacity(PER_CLIENT);
            for j in 0..PER_CLIENT {
                let body = json!({"messages": [{"role": "user", "content": format!("m{j}")}]});
                let t = Instant::now();
                // A 503 (HAProxy found no replica up: its check timed out
                // on a loaded machine) is retried, inside the latency.
                loop {
                    let r = http
                        .post(format!("{url}/v1/chat/completions"))
                        .header("x-plughost-session", &session)
                        .json(&body)
                        .send()
                        .await
                        .unwrap();
                    if r.status() == 503 {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
                    let _ = r.bytes().await.unwrap();
                    break;
                }
                took.push(t.elapsed());
            }
            took
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let wall = started.elapsed();
    all.sort();
    Figures {
        rps: all.len() as f64 / wall.as_secs_f64(),
        p50: all[all.len() / 2],
        p99: all[all.len() * 99 / 100],
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if replicas_common::haproxy_binary().is_none() {
        eprintln!("skipped: HAProxy is not installed here");
        return;
    }
    let Some(pg) = Pg::start() else { return };
    let shared = tempfile::tempdir().unwrap();
    let bundled = common::no_bundled();
    let script = echo_script(shared.path(), PER_CLIENT + 5);
    println!("| store | replicas | req/s | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|");
    for (store, url) in [("files", None), ("PostgreSQL", Some(pg.url.as_str()))] {
        for n in [1usize, 3] {
            // Files: one home the replicas share (its flock per session
            // keeps a session's turns apart); PostgreSQL: a home each.
            let one_home = common::home_with(&[]);
            let homes: Vec<tempfile::TempDir> = (0..n).map(|_| common::home_with(&[])).collect();
            let replicas: Vec<_> = (0..n)
                .map(|i| {
                    let home = if url.is_none() {
                        one_home.path()
                    } else {
                        homes[i].path()
                    };
                    serve(home, shared.path(), bundled.path(), &script, url, &[])
                })
                .collect();
            let lb = haproxy(&replicas.iter().map(|r| r.port).collect::<Vec<_>>()).unwrap();
            let tag = format!("{store}-{n}");
            // Warm up (connections, the interpreter's first turn).
            let _ = load(&lb.url, &format!("warm-{tag}")).await;
            let f = load(&lb.url, &tag).await;
            println!(
                "| {store} | {n} | {:.0} | {:.1} | {:.1} |",
                f.rps,
                f.p50.as_secs_f64() * 1000.0,
                f.p99.as_secs_f64() * 1000.0
            );
            drop(lb);
            drop(replicas);
        }
    }
}
