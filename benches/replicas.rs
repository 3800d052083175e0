//! `/v1/chat/completions` through HAProxy (each session routed to one
//! replica, as `deploy/cluster.sh` does) with 1 and 3 `plughost serve`
//! replicas, sessions in files (one shared home) against PostgreSQL
//! (`--sessions`): requests per second and p50/p99 latency, the scripted
//! model answering, 1, 16 and 64 clients each on its own named session
//! (`PLUGHOST_BENCH_CLIENTS=16` for one count), and the ratio of
//! PostgreSQL's requests per second to the files'. One run:
//! `cargo bench --bench replicas` (release build). Skipped with a reason
//! where PostgreSQL or HAProxy is not installed.
#[path = "../tests/suite/common/mod.rs"]
mod common;
#[path = "../tests/suite/replicas_common/mod.rs"]
mod replicas_common;

use std::time::{Duration, Instant};

use replicas_common::{echo_script, haproxy, haproxy_by_session, serve, Pg};
use serde_json::json;

/// Requests per measured load, shared out between the clients
/// (`PLUGHOST_BENCH_REQUESTS` for another number: a longer load to profile).
const REQUESTS: usize = 960;

/// Turns a session takes before a client moves to a new one: the default
/// load's length, so a longer load (to profile) keeps its sessions as
/// long as the measured rows' instead of growing them.
const TURNS_PER_SESSION: usize = 60;

fn requests() -> usize {
    std::env::var("PLUGHOST_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(REQUESTS)
}

struct Figures {
    rps: f64,
    p50: Duration,
    p99: Duration,
}

async fn load(url: &str, tag: &str, clients: usize, requests: usize) -> Figures {
    let per_client = (requests / clients).max(1);
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, url, tag) = (http.clone(), url.to_string(), tag.to_string());
        tasks.push(tokio::spawn(async move {
            let mut took = Vec::with_capacity(per_client);
            for j in 0..per_client {
                let session = format!("{tag}-{c}-{}", j / TURNS_PER_SESSION);
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
    let script = echo_script(shared.path(), requests() + requests() / 4 + 5);
    let counts: Vec<usize> = std::env::var("PLUGHOST_BENCH_CLIENTS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 16, 64]);
    println!("| store | replicas | clients | req/s | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|---|");
    let mut rps = std::collections::HashMap::new();
    // PLUGHOST_BENCH_STORES=postgres (or files) and PLUGHOST_BENCH_REPLICAS=1
    // narrow the run (to profile one row); the default runs every row.
    let only = |var: &str, value: &str| {
        std::env::var(var)
            .map(|v| v.split(',').any(|x| x.trim().eq_ignore_ascii_case(value)))
            .unwrap_or(true)
    };
    // The replicas reach PostgreSQL through its Unix socket, as replicas on
    // the database's own machine would (PLUGHOST_BENCH_PG=tcp: loopback TCP).
    let pg_url = if std::env::var("PLUGHOST_BENCH_PG").as_deref() == Ok("tcp") {
        pg.url.clone()
    } else {
        pg.socket_url()
    };
    for (store, url) in [("files", None), ("PostgreSQL", Some(pg_url.as_str()))] {
        if !only(
            "PLUGHOST_BENCH_STORES",
            if url.is_some() { "postgres" } else { "files" },
        ) {
            continue;
        }
        for n in [1usize, 3] {
            if !only("PLUGHOST_BENCH_REPLICAS", &n.to_string()) {
                continue;
            }
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
            // Each session routed to one replica, as deploy/cluster.sh does
            // (PLUGHOST_BENCH_BALANCE=roundrobin: any request to any replica).
            let ports: Vec<u16> = replicas.iter().map(|r| r.port).collect();
            let lb = if std::env::var("PLUGHOST_BENCH_BALANCE").as_deref() == Ok("roundrobin") {
                haproxy(&ports)
            } else {
                haproxy_by_session(&ports)
            }
            .unwrap();
            for &clients in &counts {
                let tag = format!("{store}-{n}-{clients}");
                // Warm up (connections, the interpreter's first turn).
                let _ = load(&lb.url, &format!("warm-{tag}"), clients, clients * 2).await;
                let f = load(&lb.url, &tag, clients, requests()).await;
                println!(
                    "| {store} | {n} | {clients} | {:.0} | {:.1} | {:.1} |",
                    f.rps,
                    f.p50.as_secs_f64() * 1000.0,
                    f.p99.as_secs_f64() * 1000.0
                );
                rps.insert((store, n, clients), f.rps);
            }
            drop(lb);
            drop(replicas);
        }
    }
    println!();
    println!("| replicas | clients | PostgreSQL / files |");
    println!("|---|---|---|");
    for n in [1usize, 3] {
        for &clients in &counts {
            if let (Some(pg), Some(files)) = (
                rps.get(&("PostgreSQL", n, clients)),
                rps.get(&("files", n, clients)),
            ) {
                println!("| {n} | {clients} | {:.2}x |", pg / files);
            }
        }
    }
    for &clients in &counts {
        if let (Some(three), Some(one)) = (
            rps.get(&("PostgreSQL", 3, clients)),
            rps.get(&("PostgreSQL", 1, clients)),
        ) {
            println!(
                "PostgreSQL, {clients} clients: 3 replicas / 1 = {:.2}x",
                three / one
            );
        }
    }
}
