//! One replica on a real PostgreSQL (issue 25) and what another replica
//! left in it: a session leased elsewhere (409 with Retry-After), a turn
//! that died mid-way (dropped, the session goes on from its last complete
//! turn), file sessions moved in by `plughost sessions move`, and a
//! cluster that records another plugin set. Skipped with a printed reason
//! where PostgreSQL is not installed.
use crate::common;
use crate::replicas_common;

use std::process::Command;
use std::time::Duration;

use crate::replicas_common::{echo_script, replica, Pg, Replica};
use serde_json::{json, Value};

struct One {
    replica: Replica,
    pg: Pg,
    home: tempfile::TempDir,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

/// PostgreSQL and one replica on it (which applies the schema).
async fn one(extra: &[&str]) -> Option<One> {
    let pg = Pg::start()?;
    let (home, shared, bundled) = (
        common::home_with(&[]),
        tempfile::tempdir().unwrap(),
        common::no_bundled(),
    );
    let script = echo_script(shared.path(), 50);
    let replica = replica(
        home.path(),
        shared.path(),
        bundled.path(),
        &script,
        &pg.url,
        extra,
    );
    Some(One {
        replica,
        pg,
        home,
        _dirs: (shared, bundled),
    })
}

use crate::replicas_common::post_chat as post;

async fn bodies(pg: &Pg, session: &str) -> Vec<Value> {
    pg.client()
        .await
        .query(
            "SELECT body FROM plughost_messages WHERE key = $1 AND archived IS NULL ORDER BY seq",
            &[&session],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_str(r.get::<_, &str>(0)).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_leased_by_another_replica_is_answered_409_with_retry_after() {
    let Some(o) = one(&["--lease-wait", "0.3"]).await else {
        return;
    };
    // Another replica's turn, alive (its lease runs for a minute).
    o.pg.client()
        .await
        .execute(
            "INSERT INTO plughost_leases VALUES ('busy', 'elsewhere#1', now() + interval '1 minute')",
            &[],
        )
        .await
        .unwrap();
    let busy = post(&o.replica.url, "busy", "hello").await;
    assert_eq!(busy.status(), 409);
    assert!(
        busy.headers().contains_key("retry-after"),
        "{:?}",
        busy.headers()
    );
    let error: Value = busy.json().await.unwrap();
    assert_eq!(error["error"]["code"], "session_busy");
    // Nothing of the refused turn was written; another session is served.
    assert!(bodies(&o.pg, "busy").await.is_empty());
    assert_eq!(post(&o.replica.url, "free", "hello").await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_replica_died_is_dropped_and_the_session_goes_on() {
    let Some(o) = one(&["--lease-wait", "5"]).await else {
        return;
    };
    let first = post(&o.replica.url, "s", "one").await;
    assert_eq!(first.status(), 200);
    // A replica took the next turn, wrote its user message and a tool call,
    // and died: its lease expires in a second, its rows are pending. It
    // took the lease as a replica does: it asked the one keeping it since
    // the first turn to free it, and took it freed.
    let client = o.pg.client().await;
    client
        .execute("SELECT pg_notify('plughost_lease_wanted', 's')", &[])
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let freed: bool = client
            .query_one(
                "SELECT owner IS NULL FROM plughost_leases WHERE key = 's'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if freed {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the kept lease was never freed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    client
        .batch_execute(
            "INSERT INTO plughost_leases VALUES ('s', 'dead#7', now() + interval '800 milliseconds')
               ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at;
             INSERT INTO plughost_messages (key, turn, pending, body) VALUES
               ('s', 'dead#7', true, '{\"role\":\"user\",\"content\":\"lost\"}'),
               ('s', 'dead#7', true, '{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"t\",\"arguments\":\"{}\"}}]}');",
        )
        .await
        .unwrap();
    // The next request waits for the lease to expire, then continues.
    let next = post(&o.replica.url, "s", "two").await;
    assert_eq!(next.status(), 200);
    let texts: Vec<String> = bodies(&o.pg, "s")
        .await
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(texts, ["one", "re: one", "two", "re: two"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sessions_moved_into_postgres_continue_there() {
    let Some(o) = one(&[]).await else { return };
    // Another home, its sessions on disk.
    let old = common::home_with(&[]);
    let dir = old.path().join("sessions");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("notes%2Fa.jsonl"),
        "{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"assistant\",\"content\":\"hello\"}\n",
    )
    .unwrap();
    let bundled = common::no_bundled();
    let mv = |home: &std::path::Path| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.arg("--home")
            .arg(home)
            .args(["sessions", "move", "--to", &o.pg.url])
            .env("PLUGHOST_BUNDLED_DIR", bundled.path());
        common::run_bounded(cmd, Duration::from_secs(60))
    };
    let out = mv(old.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("moved notes/a (2 messages)"), "{stdout}");
    assert!(dir.join("notes%2Fa.jsonl.moved").exists());
    // Moving again finds it there and leaves the file alone.
    std::fs::write(
        dir.join("notes%2Fa.jsonl"),
        "{\"role\":\"user\",\"content\":\"x\"}\n",
    )
    .unwrap();
    let again = mv(old.path());
    assert!(String::from_utf8_lossy(&again.stdout).contains("kept notes/a"));
    assert!(dir.join("notes%2Fa.jsonl").exists());
    // The replica continues it.
    assert_eq!(post(&o.replica.url, "notes/a", "more").await.status(), 200);
    let texts: Vec<String> = bodies(&o.pg, "notes/a")
        .await
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts, ["hi", "hello", "more", "re: more"]);
    drop(o.home);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_another_plugin_set_says_so() {
    let Some(first) = one(&[]).await else { return };
    let health = reqwest::get(format!("{}/healthz", first.replica.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(health.contains("cluster plugins match"), "{health}");
    // The cluster recorded another set (a replica updated before this one).
    first
        .pg
        .client()
        .await
        .execute(
            "UPDATE plughost_cluster SET value = 'sha256:other', set_by = 'r9' WHERE name = 'plugin_fingerprint'",
            &[],
        )
        .await
        .unwrap();
    let (shared, bundled) = (tempfile::tempdir().unwrap(), common::no_bundled());
    let home = common::home_with(&[]);
    let script = echo_script(shared.path(), 5);
    let second = replica(
        home.path(),
        shared.path(),
        bundled.path(),
        &script,
        &first.pg.url,
        &[],
    );
    let health = reqwest::get(format!("{}/healthz", second.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(health.contains("cluster plugins DIFFER"), "{health}");
    assert!(health.contains("sha256:other (recorded by r9)"), "{health}");
    let warned = second.early.join("\n");
    assert!(
        warned.contains("differs from the cluster's (sha256:other, recorded by r9)"),
        "{warned}"
    );
    let metrics = reqwest::get(format!("{}/metrics", second.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("plughost_plugin_set_matches_cluster 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("plughost_plugin_set_info{fingerprint=\"sha256:"),
        "{metrics}"
    );
}

const COUNTER: &str = r#"
import os

def register(ctx):
    def bump(step: int = 1):
        with open(os.path.join(os.environ["PLUGHOST_HOME_FOR_TEST"], "bumps.log"), "a") as f:
            f.write(f"{os.getpid()}\n")
        return f"bumped by {step}"
    ctx.register_tool("bump", {"type": "object", "properties": {"step": {"type": "integer"}}}, bump, description="Count a call")
"#;

/// One JSON-RPC request in MCP session `session` (or a new one) at `url`;
/// the answer to `id`, read from JSON or an event stream.
async fn mcp(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: Value,
) -> (Option<String>, Value) {
    let mut req = http
        .post(format!("{url}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    let r = req.body(body.to_string()).send().await.unwrap();
    let id = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let text = r.text().await.unwrap();
    let answer = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:").or(Some(l)))
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .find(|v| v.get("id").is_some() && v["id"] == body["id"])
        .unwrap_or(Value::Null);
    (id, answer)
}

async fn mcp_session(http: &reqwest::Client, url: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let (session, _) = mcp(http, url, None, init).await;
    let session = session.unwrap();
    let _ = mcp(
        http,
        url,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_tools_call_retried_with_its_idempotency_key_on_another_replica_runs_once() {
    let Some(pg) = Pg::start() else { return };
    let (shared, bundled) = (tempfile::tempdir().unwrap(), common::no_bundled());
    let script = echo_script(shared.path(), 5);
    let mut homes = Vec::new();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let home = common::home_with(&["counter"]);
        common::write_plugin(
            &home.path().join("plugins"),
            "counter",
            "name: counter\nversion: 0.1.0\n",
            &[("__init__.py", COUNTER)],
        );
        replicas.push(replica(
            home.path(),
            shared.path(),
            bundled.path(),
            &script,
            &pg.url,
            &[],
        ));
        homes.push(home);
    }
    let http = reqwest::Client::new();
    let call = |key: &str, step: i64| {
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "bump", "arguments": {"step": step}, "_meta": {"idempotencyKey": key}}})
    };
    let mut answers = Vec::new();
    for r in &replicas {
        let session = mcp_session(&http, &r.url).await;
        let (_, answer) = mcp(&http, &r.url, Some(&session), call("bump-1", 2)).await;
        answers.push(answer["result"].clone());
    }
    assert_eq!(
        answers[0]["content"][0]["text"], "bumped by 2",
        "{answers:?}"
    );
    assert_eq!(answers[0], answers[1]);
    let bumps = std::fs::read_to_string(shared.path().join("bumps.log")).unwrap();
    assert_eq!(bumps.lines().count(), 1, "{bumps}");
    // Another key runs again; the same key with other arguments is refused.
    let session = mcp_session(&http, &replicas[1].url).await;
    let (_, other) = mcp(&http, &replicas[1].url, Some(&session), call("bump-2", 2)).await;
    assert_eq!(other["result"]["content"][0]["text"], "bumped by 2");
    let (_, reused) = mcp(&http, &replicas[1].url, Some(&session), call("bump-1", 3)).await;
    assert!(
        reused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("another tool or other arguments"),
        "{reused}"
    );
    assert_eq!(
        std::fs::read_to_string(shared.path().join("bumps.log"))
            .unwrap()
            .lines()
            .count(),
        2
    );
}

/// `deploy/cluster.sh` as docs/deploy.md runs it: PostgreSQL, three
/// replicas and HAProxy; a session's turns through the balancer land on
/// whichever replica and the transcript is whole; `stop` ends it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_script_starts_a_cluster_that_serves_a_session_through_haproxy() {
    if replicas_common::haproxy_binary().is_none()
        || !std::path::Path::new("/usr/lib/postgresql").exists()
    {
        common::missing(
            "PostgreSQL and HAProxy",
            "apt-get install postgresql haproxy",
        );
    }
    let state = tempfile::tempdir().unwrap();
    let home = common::home_with(&[]);
    let bundled = common::no_bundled();
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/cluster.sh");
    let (lb, pg) = (replicas_common::free_port(), replicas_common::free_port());
    let cluster = |what: &str| {
        let mut cmd = Command::new("bash");
        cmd.arg(&script)
            .arg(what)
            .arg(state.path())
            .env("PLUGHOST", env!("CARGO_BIN_EXE_plughost"))
            .env("PLUGHOST_HOME", home.path())
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .env("LB_PORT", lb.to_string())
            .env("PG_PORT", pg.to_string());
        if what == "start" {
            cmd.args(["--", "--model", "scripted:demo"]);
        }
        common::run_bounded(cmd, Duration::from_secs(120))
    };
    // The private temporary directory must let the postgres user through.
    std::fs::set_permissions(
        state.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let started = cluster("start");
    let out = String::from_utf8_lossy(&started.stdout).into_owned();
    let stopper = scopeguard(|| {
        cluster("stop");
    });
    assert!(
        started.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&started.stderr)
    );
    assert_eq!(out.matches("replica ").count(), 3, "{out}");
    let url = format!("http://127.0.0.1:{lb}");
    for i in 0..3 {
        let r = post(&url, "deployed", &format!("m{i}")).await;
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    let health = reqwest::get(format!("{url}/healthz"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(health.contains("cluster plugins match"), "{health}");
    drop(stopper);
    // Stopped: the balancer goes away (a signalled process, so polled).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while reqwest::get(format!("{url}/healthz")).await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the balancer still answers after stop"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `f` when dropped (the cluster is stopped even when an assertion fails).
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}
