//! What a session carries from one replica to another beyond its
//! transcript, and how a replica lives through its database going away
//! (issue 25), on a real PostgreSQL: a Codumentor plugin's per-session
//! usage totals set on replica A go on on replica B; a sub-agent's session
//! is stored in PostgreSQL, not in files; requests while PostgreSQL is
//! stopped are answered 503 with Retry-After and the replica recovers by
//! itself once it is back; a turn reads only what other replicas appended
//! since its replica's last message (both stores). Skipped with a printed
//! reason where PostgreSQL is not installed.
use crate::common;
use crate::replicas_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::replicas_common::{replica, Pg};
use plughost::agent::session::pg::PgSessions;
use plughost::agent::session::SessionStore;
use plughost::cluster::Cluster;
use serde_json::{json, Value};

use crate::replicas_common::post_chat as post;

async fn reply(url: &str, session: &str, text: &str) -> String {
    let r = post(url, session, text).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

fn script(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("script.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

const USAGE: &str = r#"
import os


class Usage:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onUsageTracked", self.usage)

    async def usage(self, agent, ctx, payload):
        path = os.path.join(os.environ["PLUGHOST_HOME_FOR_TEST"], "usage.log")
        with open(path, "a") as f:
            f.write(f"{payload['session_totals']['total_tokens']}\n")
"#;

/// A home with the Codumentor plugin `usage` (trusted: in-process).
fn usage_home() -> tempfile::TempDir {
    let home = common::home_with(&["usage"]);
    let config = json!({"plugins": {"enabled": ["usage"], "disabled": [], "trusted": ["usage"]}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let dir = home.path().join("plugins/usage");
    std::fs::create_dir_all(dir.join("backend/usage_pkg")).unwrap();
    std::fs::write(
        dir.join("plugin.yaml"),
        "name: usage\ndialect: codumentor\nentry: usage_pkg:Usage\n",
    )
    .unwrap();
    std::fs::write(dir.join("backend/usage_pkg/__init__.py"), USAGE).unwrap();
    home
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codumentor_sessions_usage_totals_set_on_one_replica_go_on_on_another() {
    let Some(pg) = Pg::start() else { return };
    let (shared, bundled) = (tempfile::tempdir().unwrap(), common::no_bundled());
    let mut text = String::from("turns:\n");
    for _ in 0..6 {
        text.push_str("  - say: \"re: {user_message}\"\n    usage: {prompt_tokens: 10, completion_tokens: 1, total_tokens: 11}\n");
    }
    let script = script(shared.path(), &text);
    let (home_a, home_b) = (usage_home(), usage_home());
    let a = replica(
        home_a.path(),
        shared.path(),
        bundled.path(),
        &script,
        &pg.url,
        &[],
    );
    let b = replica(
        home_b.path(),
        shared.path(),
        bundled.path(),
        &script,
        &pg.url,
        &[],
    );
    reply(&a.url, "s", "one").await;
    reply(&b.url, "s", "two").await;
    reply(&a.url, "s", "three").await;
    let log = std::fs::read_to_string(shared.path().join("usage.log")).unwrap();
    // Without the stored state, B would start from 0 (11) and A would
    // not see B's call (22).
    assert_eq!(log.lines().collect::<Vec<_>>(), ["11", "22", "33"]);
    let state: String = pg
        .client()
        .await
        .query_one("SELECT state FROM plughost_sessions WHERE key = 's'", &[])
        .await
        .unwrap()
        .get(0);
    let state: Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["codumentor"]["usage_totals"]["total_tokens"], 33);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_session_is_stored_in_postgres() {
    let Some(pg) = Pg::start() else { return };
    let (home, shared, bundled) = (
        common::home_with(&[]),
        tempfile::tempdir().unwrap(),
        common::no_bundled(),
    );
    let script = script(
        shared.path(),
        "turns:\n  - tool_calls:\n      - name: delegate\n        args: {task: \"look\", tools: [\"list_dir\"]}\n  - say: \"got: {tool_results}\"\n",
    );
    let r = replica(
        home.path(),
        shared.path(),
        bundled.path(),
        &script,
        &pg.url,
        &[],
    );
    let answer = reply(&r.url, "p", "go").await;
    // The sub-agent replays the script from the top: its delegate is refused.
    assert!(answer.starts_with("got: got: "), "{answer}");
    let rows: Vec<String> = pg
        .client()
        .await
        .query(
            "SELECT body FROM plughost_messages WHERE key = 'p/sub-1' AND NOT pending ORDER BY seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(rows.first().is_some_and(|m| m.contains("look")), "{rows:?}");
    assert!(rows.len() >= 3, "{rows:?}");
    let files: Vec<_> = std::fs::read_dir(home.path().join("sessions"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(files.is_empty(), "no session in files: {files:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_while_postgres_is_down_get_503_and_the_replica_recovers_by_itself() {
    let Some(pg) = Pg::start() else { return };
    let (home, shared, bundled) = (
        common::home_with(&[]),
        tempfile::tempdir().unwrap(),
        common::no_bundled(),
    );
    let script = replicas_common::echo_script(shared.path(), 50);
    let r = replica(
        home.path(),
        shared.path(),
        bundled.path(),
        &script,
        &pg.url,
        &[],
    );
    assert_eq!(reply(&r.url, "r", "before").await, "re: before");
    pg.stop();
    for _ in 0..3 {
        let during = post(&r.url, "r", "during").await;
        assert_eq!(during.status(), 503);
        let retry = during.headers().get("retry-after").cloned();
        let body: Value = during.json().await.unwrap();
        assert!(retry.is_some(), "{body}");
        assert_eq!(body["error"]["code"], "sessions_unavailable", "{body}");
    }
    pg.start_again();
    // Back without a restart of the replica: the pool connects again.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let after = post(&r.url, "r", "after").await;
        if after.status() == 200 {
            break;
        }
        assert_eq!(after.status(), 503, "only 503 while it reconnects");
        assert!(Instant::now() < deadline, "the replica did not recover");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let users: Vec<String> = pg
        .client()
        .await
        .query(
            "SELECT body FROM plughost_messages WHERE key = 'r' AND NOT pending ORDER BY seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| serde_json::from_str::<Value>(row.get(0)).unwrap())
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(users, ["before", "after"]);
}

/// Two stores, as two replicas (or two processes) see one session.
fn pair(pg: Option<&Pg>) -> (SessionStore, SessionStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = || {
        let s = SessionStore::new(dir.path().join("sessions"));
        if let Some(pg) = pg {
            let cluster = Cluster::connect(&pg.url, Duration::from_secs(10)).unwrap();
            s.use_backend(Arc::new(PgSessions::new(cluster)));
        }
        s
    };
    (store(), store(), dir)
}

/// One turn on `store`'s `key`: held, brought up to date, `text` appended;
/// returns the messages it saw before appending.
async fn turn(store: &SessionStore, key: &str, text: Option<&str>) -> Vec<Value> {
    let session = store.get(key);
    let mut s = session.lock().await;
    let _lock = s.lock_turn(Duration::from_secs(5)).await.unwrap();
    s.resync().unwrap();
    let seen = s.messages.clone();
    if let Some(text) = text {
        s.append(json!({"role": "user", "content": text})).unwrap();
    }
    seen
}

async fn reads_only_what_was_appended(pg: Option<&Pg>) {
    let (a, b, _dir) = pair(pg);
    turn(&a, "k", Some("a1")).await;
    turn(&b, "k", Some("b1")).await;
    // A mark only A's memory has: a turn that read the transcript again
    // would lose it.
    a.get("k").lock().await.messages[0]["mark"] = json!("kept");
    let seen = turn(&a, "k", None).await;
    let contents: Vec<_> = seen.iter().map(|m| m["content"].clone()).collect();
    assert_eq!(contents, [json!("a1"), json!("b1")]);
    assert_eq!(seen[0]["mark"], "kept", "what A had was read again");
    // Compaction elsewhere replaces the transcript: then all is read.
    {
        let session = b.get("k");
        let mut s = session.lock().await;
        let _lock = s.lock_turn(Duration::from_secs(5)).await.unwrap();
        s.resync().unwrap();
        s.append(json!({"role": "user", "content": "b2"})).unwrap();
        s.compact_with(1, Some(json!({"role": "user", "content": "summary"})))
            .unwrap();
    }
    let seen = turn(&a, "k", None).await;
    let contents: Vec<_> = seen.iter().map(|m| m["content"].clone()).collect();
    assert_eq!(contents, [json!("summary"), json!("b2")]);
    assert!(seen[0].get("mark").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_reads_only_what_another_replica_appended_in_postgres() {
    let Some(pg) = Pg::start() else { return };
    reads_only_what_was_appended(Some(&pg)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_reads_only_what_another_process_appended_to_the_file() {
    reads_only_what_was_appended(None).await;
}

/// A message written outside any turn (a session hook at eviction) on
/// replica B while replica A's turn holds the session: it is not written
/// under A's turn (refused once B has waited its lease time to live, here
/// 300 ms), and written after A's turn ends when B waits for it, so A's
/// next turn, reading only what follows its last message, sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_written_outside_a_turn_waits_for_the_turn_holding_the_session() {
    let Some(pg) = Pg::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = |ttl| {
        let s = SessionStore::new(dir.path().join("sessions"));
        let cluster = Cluster::connect(&pg.url, ttl).unwrap();
        s.use_backend(Arc::new(PgSessions::new(cluster)));
        s
    };
    let a = store(Duration::from_secs(10));
    let impatient = store(Duration::from_millis(300));
    let patient = store(Duration::from_secs(30));
    turn(&a, "k", Some("a1")).await;
    let outside = |store: &SessionStore| {
        let session = store.get("k");
        std::thread::spawn(move || {
            session
                .blocking_lock()
                .append(json!({"role": "user", "content": "outside"}))
        })
    };
    {
        let session = a.get("k");
        let mut s = session.lock().await;
        let _lock = s.lock_turn(Duration::from_secs(5)).await.unwrap();
        s.resync().unwrap();
        let refused = outside(&impatient).join().unwrap().unwrap_err();
        assert!(refused.to_string().contains("a turn holds it"), "{refused}");
        let waiting = outside(&patient);
        s.append(json!({"role": "user", "content": "a2"})).unwrap();
        // A's turn ends here (the lock, then the session, released).
        drop(_lock);
        drop(s);
        waiting.join().unwrap().unwrap();
    }
    let seen = turn(&a, "k", None).await;
    let contents: Vec<_> = seen.iter().map(|m| m["content"].clone()).collect();
    assert_eq!(contents, [json!("a1"), json!("a2"), json!("outside")]);
}

/// A message written outside any turn, once the lease of a turn that died
/// has expired: taking the lease over deletes the dead turn's pending
/// messages, as a turn's lease does, and the message is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_written_outside_a_turn_drops_a_dead_turns_messages() {
    let Some(pg) = Pg::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = SessionStore::new(dir.path().join("sessions"));
    let cluster = Cluster::connect(&pg.url, Duration::from_secs(10)).unwrap();
    store.use_backend(Arc::new(PgSessions::new(cluster)));
    turn(&store, "k", Some("a1")).await;
    let db = pg.client().await;
    db.batch_execute(
        "INSERT INTO plughost_leases VALUES ('k', 'dead#9', now() + interval '300 milliseconds')
           ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at;
         INSERT INTO plughost_messages (key, turn, pending, body)
           VALUES ('k', 'dead#9', true, '{\"role\":\"user\",\"content\":\"lost\"}');",
    )
    .await
    .unwrap();
    let session = store.get("k");
    std::thread::spawn(move || {
        session
            .blocking_lock()
            .append(json!({"role": "user", "content": "outside"}))
    })
    .join()
    .unwrap()
    .unwrap();
    let rows = db
        .query(
            "SELECT body, pending FROM plughost_messages WHERE key = 'k' ORDER BY seq",
            &[],
        )
        .await
        .unwrap();
    let stored: Vec<(String, bool)> = rows
        .iter()
        .map(|r| {
            let body: Value = serde_json::from_str(r.get::<_, &str>(0)).unwrap();
            (body["content"].as_str().unwrap().to_string(), r.get(1))
        })
        .collect();
    assert_eq!(
        stored,
        [("a1".to_string(), false), ("outside".to_string(), false)]
    );
}

/// A turn whose lease another replica takes over while the turn's release
/// waits for the lease row stores nothing, and is told so: the release is
/// fenced on the row's latest version, not on what its snapshot saw. The
/// overlap is proven by the release's backend waiting on the takeover's
/// row lock (`pg_stat_activity`) before the takeover commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_waited_on_a_takeover_stores_nothing() {
    use plughost::cluster::lease::TurnWrites;
    let Some(pg) = Pg::start() else { return };
    let cluster = Cluster::connect(&pg.url, Duration::from_secs(10)).unwrap();
    let ttl = Duration::from_secs(10);
    let lease = cluster.lease_session("k", ttl).await.unwrap();
    let takeover = pg.client().await;
    takeover
        .batch_execute(
            "BEGIN; UPDATE plughost_leases SET owner = 'turn#2', taken_from = owner WHERE key = 'k'",
        )
        .await
        .unwrap();
    let writes = TurnWrites {
        lines: vec![r#"{"role":"user","content":"late"}"#.to_string()],
        state: None,
    };
    let release = tokio::spawn(lease.release_with(writes, None));
    let watcher = pg.client().await;
    waiting_on_locks(
        &watcher,
        1,
        "the release never waited on the takeover's row lock",
    )
    .await;
    takeover.batch_execute("COMMIT").await.unwrap();
    let released = release.await.unwrap().unwrap();
    assert!(!released.fenced, "{released:?}");
    assert_eq!(released.stored, 0, "{released:?}");
    let stored: i64 = watcher
        .query_one(
            "SELECT count(*) FROM plughost_messages WHERE key = 'k'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 0, "the late turn's message was stored");
}

/// Releases stored in one batch are each fenced by their own lease: of
/// three turns ending together, the one whose lease another replica took
/// stores nothing and is told so; the other two store all they wrote. The
/// three are made to share a statement: two earlier releases hold both
/// statements a replica runs at once, waiting on the test's row locks
/// (seen in `pg_stat_activity`), while the three are queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_stored_together_are_each_fenced_by_their_own_lease() {
    use plughost::cluster::lease::{Released, TurnWrites};
    use std::future::Future;
    let Some(pg) = Pg::start() else { return };
    let cluster = Cluster::connect(&pg.url, Duration::from_secs(10)).unwrap();
    let ttl = Duration::from_secs(10);
    let writes = |key: &str| TurnWrites {
        lines: vec![
            format!(r#"{{"role":"user","content":"{key}1"}}"#),
            format!(r#"{{"role":"assistant","content":"{key}2"}}"#),
        ],
        state: None,
    };
    let mut leases = std::collections::HashMap::new();
    for key in ["x", "y", "a", "b", "c"] {
        leases.insert(key, cluster.lease_session(key, ttl).await.unwrap());
    }
    let blocker = pg.client().await;
    blocker
        .batch_execute("BEGIN; SELECT 1 FROM plughost_leases WHERE key IN ('x', 'y') FOR UPDATE")
        .await
        .unwrap();
    let mut ends = Vec::new();
    for key in ["x", "y"] {
        let lease = leases.remove(key).unwrap();
        ends.push((key, tokio::spawn(lease.release_with(writes(key), None))));
    }
    let watcher = pg.client().await;
    waiting_on_locks(
        &watcher,
        2,
        "the two releases never waited on the test's row locks",
    )
    .await;
    watcher
        .batch_execute("UPDATE plughost_leases SET owner = 'elsewhere#1' WHERE key = 'b'")
        .await
        .unwrap();
    for key in ["a", "b", "c"] {
        let lease = leases.remove(key).unwrap();
        let mut end: std::pin::Pin<Box<dyn Future<Output = _> + Send>> =
            Box::pin(lease.release_with(writes(key), None));
        // Polled once: queued behind the two running statements.
        std::future::poll_fn(|cx| {
            let _ = end.as_mut().poll(cx);
            std::task::Poll::Ready(())
        })
        .await;
        ends.push((key, tokio::spawn(end)));
    }
    blocker.batch_execute("COMMIT").await.unwrap();
    let mut told = Vec::new();
    for (key, end) in ends {
        let r: Released = end.await.unwrap().unwrap();
        told.push((key, r.stored, r.fenced));
    }
    assert_eq!(
        told,
        [
            ("x", 2, true),
            ("y", 2, true),
            ("a", 2, true),
            ("b", 0, false),
            ("c", 2, true)
        ]
    );
    let client = pg.client().await;
    for (key, want) in [("a", 2i64), ("b", 0), ("c", 2)] {
        let stored: i64 = client
            .query_one(
                "SELECT count(*) FROM plughost_messages WHERE key = $1",
                &[&key],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(stored, want, "session {key}");
    }
    // The three went in one statement: a's and c's rows were written by
    // one transaction.
    let transactions: i64 = client
        .query_one(
            "SELECT count(DISTINCT xmin::text) FROM plughost_messages WHERE key IN ('a', 'c')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(transactions, 1, "a and c stored by separate statements");
    let owners: Vec<(String, Option<String>)> = client
        .query(
            "SELECT key, owner FROM plughost_leases WHERE key IN ('a', 'b', 'c') ORDER BY key",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        owners[1],
        ("b".to_string(), Some("elsewhere#1".to_string()))
    );
    assert!(
        owners[0].1.is_some() && owners[2].1.is_some(),
        "kept: {owners:?}"
    );
}

/// Wait until `n` backends wait on a lock (`pg_stat_activity`), failing
/// with `what` after 20 s.
async fn waiting_on_locks(watcher: &tokio_postgres::Client, n: i64, what: &str) {
    let since = Instant::now();
    loop {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting >= n {
            return;
        }
        assert!(since.elapsed() < Duration::from_secs(20), "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
