//! Replicas on PostgreSQL (issue 25): three `plughost serve --sessions
//! postgres://…` behind HAProxy with round-robin routing, against a real
//! PostgreSQL each test starts (initdb into a temporary directory). Skipped
//! with a printed reason where PostgreSQL or HAProxy is not installed.
use crate::common;
use crate::replicas_common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::replicas_common::{echo_script, haproxy, replica, Lb, Pg, Replica};
use serde_json::{json, Value};

struct Cluster {
    // Dropped in this order: the balancer, the replicas, then the database.
    lb: Option<Lb>,
    replicas: Vec<Replica>,
    pg: Pg,
    _dirs: Vec<tempfile::TempDir>,
}

/// PostgreSQL, `n` replicas (each its own home, the same plugins) and,
/// with `balanced`, HAProxy in front.
fn cluster(n: usize, balanced: bool, extra: &[&str], plugin: Option<&str>) -> Option<Cluster> {
    if balanced && replicas_common::haproxy_binary().is_none() {
        common::missing("HAProxy", "apt-get install haproxy");
    }
    let pg = Pg::start()?;
    let shared = tempfile::tempdir().unwrap();
    let bundled = common::no_bundled();
    let script = echo_script(shared.path(), 400);
    let mut dirs = Vec::new();
    let mut replicas = Vec::new();
    for _ in 0..n {
        let home = match plugin {
            Some(code) => felix_home(code),
            None => common::home_with(&[]),
        };
        replicas.push(replica(
            home.path(),
            shared.path(),
            bundled.path(),
            &script,
            &pg.url,
            extra,
        ));
        dirs.push(home);
    }
    let lb = if balanced {
        Some(haproxy(
            &replicas.iter().map(|r| r.port).collect::<Vec<_>>(),
        )?)
    } else {
        None
    };
    dirs.push(shared);
    dirs.push(bundled);
    Some(Cluster {
        lb,
        replicas,
        pg,
        _dirs: dirs,
    })
}

/// A trusted home with the Felix plugin `ticker` holding `code`.
fn felix_home(code: &str) -> tempfile::TempDir {
    let home = common::home_with(&["ticker"]);
    let config = json!({"plugins": {"enabled": ["ticker"], "disabled": [], "trusted": ["ticker"]}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let tree = home.path().join("plugins/felix-ticker");
    std::fs::create_dir_all(tree.join("src/felix_ticker")).unwrap();
    std::fs::write(
        tree.join("pyproject.toml"),
        "[project]\nname = \"felix-ticker\"\nversion = \"0.1.0\"\n\n[project.entry-points.\"felix.plugins\"]\nticker = \"felix_ticker:register\"\n",
    )
    .unwrap();
    std::fs::write(tree.join("src/felix_ticker/__init__.py"), code).unwrap();
    home
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// One chat turn on `session`, retried (same Idempotency-Key) on what a
/// client of a cluster must retry: a refused or cut connection, 409, 502,
/// 503. Returns the reply and how many tries it took.
async fn chat(http: &reqwest::Client, url: &str, session: &str, text: &str) -> (String, u32) {
    let body = json!({"model": "x", "messages": [{"role": "user", "content": text}]});
    let key = format!("{session}/{text}");
    for attempt in 1..=200 {
        let sent = http
            .post(format!("{url}/v1/chat/completions"))
            .header("x-plughost-session", session)
            .header("idempotency-key", &key)
            .json(&body)
            .send()
            .await;
        match sent {
            Ok(r) if r.status() == 200 => {
                let v: Value = r.json().await.unwrap();
                let reply = v["choices"][0]["message"]["content"].as_str().unwrap();
                return (reply.to_string(), attempt);
            }
            Ok(r) if [409, 502, 503].contains(&r.status().as_u16()) => {}
            Ok(r) => panic!("{text}: {} {}", r.status(), r.text().await.unwrap()),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{text}: no answer after 200 tries");
}

/// The transcript of `session` as stored (complete turns only).
async fn transcript(pg: &Pg, session: &str) -> Vec<Value> {
    let client = pg.client().await;
    let rows = client
        .query(
            "SELECT body FROM plughost_messages WHERE key = $1 AND archived IS NULL AND NOT pending ORDER BY seq",
            &[&session],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| serde_json::from_str(r.get::<_, &str>(0)).unwrap())
        .collect()
}

/// Each message sent appears once, answered right after, and each
/// client's messages in the order it sent them.
fn assert_complete(messages: &[Value], clients: usize, per_client: usize) {
    assert_eq!(messages.len(), clients * per_client * 2, "{messages:#?}");
    let mut next: HashMap<usize, usize> = HashMap::new();
    for pair in messages.chunks(2) {
        assert_eq!(pair[0]["role"], "user", "{pair:?}");
        let text = pair[0]["content"].as_str().unwrap();
        assert_eq!(pair[1]["role"], "assistant", "{pair:?}");
        assert_eq!(pair[1]["content"], format!("re: {text}"), "{pair:?}");
        let (c, j) = text.trim_start_matches('c').split_once('-').unwrap();
        let (c, j): (usize, usize) = (c.parse().unwrap(), j.parse().unwrap());
        let expected = next.entry(c).or_insert(0);
        assert_eq!(
            j, *expected,
            "client {c}'s messages out of order or repeated"
        );
        *expected += 1;
    }
    assert_eq!(next.len(), clients);
    assert!(next.values().all(|&n| n == per_client), "{next:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_through_the_balancer_by_32_clients_stays_complete_and_in_order() {
    let Some(c) = cluster(3, true, &[], None) else {
        return;
    };
    let url = c.lb.as_ref().unwrap().url.clone();
    let http = client();
    let (clients, each) = (32, 3);
    let mut tasks = Vec::new();
    for i in 0..clients {
        let (http, url) = (http.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            for j in 0..each {
                let text = format!("c{i}-{j}");
                let (reply, _) = chat(&http, &url, "shared", &text).await;
                assert_eq!(reply, format!("re: {text}"));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_complete(&transcript(&c.pg, "shared").await, clients, each);
    // Every replica ran some of its turns: no stickiness.
    let client = c.pg.client().await;
    let owners: i64 = client
        .query_one(
            "SELECT count(DISTINCT split_part(turn, '#', 1)) FROM plughost_messages WHERE key = 'shared'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(owners, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_idempotency_key_on_another_replica_is_answered_once() {
    let Some(c) = cluster(2, false, &[], None) else {
        return;
    };
    let http = client();
    let body = json!({"messages": [{"role": "user", "content": "pay once"}]});
    let send = |url: String, body: Value| {
        let http = http.clone();
        async move {
            http.post(format!("{url}/v1/chat/completions"))
                .header("x-plughost-session", "wallet")
                .header("idempotency-key", "order-17")
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    };
    let first = send(c.replicas[0].url.clone(), body.clone()).await;
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let retry = send(c.replicas[1].url.clone(), body.clone()).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let retry: Value = retry.json().await.unwrap();
    assert_eq!(retry, first, "the same answer, id included");
    // The turn ran once.
    let messages = transcript(&c.pg, "wallet").await;
    assert_eq!(messages.len(), 2, "{messages:#?}");
    // The same key for another request is refused.
    let other = send(
        c.replicas[1].url.clone(),
        json!({"messages": [{"role": "user", "content": "pay twice"}]}),
    )
    .await;
    assert_eq!(other.status(), 422);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_during_load_loses_no_message_and_its_sessions_go_on() {
    let Some(mut c) = cluster(3, true, &["--lease-ttl", "1.5"], None) else {
        return;
    };
    let url = c.lb.as_ref().unwrap().url.clone();
    let http = client();
    let (sessions, each) = (8, 12);
    let retried = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let (http, url, retried, done) = (http.clone(), url.clone(), retried.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            for j in 0..each {
                let text = format!("c0-{j}");
                let (reply, tries) = chat(&http, &url, &format!("s{s}"), &text).await;
                assert_eq!(reply, format!("re: {text}"));
                retried.fetch_add(tries - 1, std::sync::atomic::Ordering::Relaxed);
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    // Kill a replica once the load is under way (a quarter of the turns done).
    while done.load(std::sync::atomic::Ordering::Relaxed) < sessions * each / 4 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let killed = c.replicas.remove(0);
    let killed_name = killed.child.id();
    drop(killed); // SIGKILL
    let at_kill = done.load(std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert!(at_kill < sessions * each, "the kill came after the load");
    let client = c.pg.client().await;
    for s in 0..sessions {
        assert_complete(&transcript(&c.pg, &format!("s{s}")).await, 1, each);
    }
    // The killed replica had run turns of these sessions, and the others
    // ran their later turns.
    let pattern = format!("%:{killed_name}:%");
    let by_killed: i64 = client
        .query_one(
            "SELECT count(*) FROM plughost_messages WHERE turn LIKE $1",
            &[&pattern],
        )
        .await
        .unwrap()
        .get(0);
    assert!(by_killed > 0, "the killed replica served no turn");
    let pending: i64 = client
        .query_one("SELECT count(*) FROM plughost_messages WHERE pending", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(pending, 0, "an unfinished turn left messages");
}

const TICKER: &str = r#"
import os, time
from felix.plugins import PluginCronTask

LOG = os.path.join(os.environ["PLUGHOST_HOME_FOR_TEST"], "ticks.log")

async def tick():
    with open(LOG, "a") as f:
        f.write(f"{os.getpid()} {time.time():.3f}\n")

class Plugin:
    name = "ticker"

    def register_tools(self, register):
        pass

    @property
    def cron_tasks(self):
        return (PluginCronTask(name="tick", run=tick),)

def register(registry):
    registry.register_plugin(Plugin())
"#;

fn ticks(shared: &Path) -> Vec<(u32, f64)> {
    std::fs::read_to_string(shared.join("ticks.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (pid, ts) = l.split_once(' ').unwrap();
            (pid.parse().unwrap(), ts.parse().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_task_runs_once_per_tick_across_three_replicas() {
    let Some(c) = cluster(3, false, &["--cron-every", "1"], Some(TICKER)) else {
        return;
    };
    let shared = c._dirs[3].path().to_path_buf();
    let client = c.pg.client().await;
    // Wait for six claimed ticks.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let n: i64 = client
            .query_one("SELECT count(*) FROM plughost_cron_ticks", &[])
            .await
            .unwrap()
            .get(0);
        if n >= 6 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {n} ticks claimed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rows = client
        .query(
            "SELECT tick, owner FROM plughost_cron_ticks ORDER BY tick",
            &[],
        )
        .await
        .unwrap();
    let runs = ticks(&shared);
    // Every replica saw every tick; each tick ran on exactly one: the runs
    // fall in distinct seconds, as many as the claims written so far (a
    // tick claimed just now may not have run yet).
    let claimed: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    let mut seconds: Vec<i64> = runs.iter().map(|(_, ts)| ts.floor() as i64).collect();
    seconds.sort();
    let before = seconds.len();
    seconds.dedup();
    assert_eq!(seconds.len(), before, "two runs in one tick: {runs:?}");
    assert!(
        runs.len() == claimed.len() || runs.len() + 1 == claimed.len(),
        "{} runs for {} claimed ticks: {runs:?} {claimed:?}",
        runs.len(),
        claimed.len()
    );
    for s in &seconds {
        assert!(
            claimed.contains(s),
            "a run at {s} outside any claimed tick {claimed:?}"
        );
    }
    let pids: std::collections::HashSet<u32> = runs.iter().map(|r| r.0).collect();
    let ours: std::collections::HashSet<u32> = c.replicas.iter().map(|r| r.child.id()).collect();
    assert!(pids.is_subset(&ours), "{pids:?} {ours:?}");
}
