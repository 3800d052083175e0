//! An isolated plugin's per-session state is stored with the session
//! exactly as an in-process plugin's (issue 25): `plughost serve` isolates
//! third-party plugins, so a Codumentor plugin's `session_totals` are
//! counted in its worker process. The worker is handed the stored state
//! when a turn of the session reaches it and reports it back when a hook
//! changed it; the host stores it in PostgreSQL at the turn's end. So the
//! totals go on on another replica and after the worker is killed, and a
//! worker that dies before it could report costs only what it counted
//! since (the turn completes, a warning is logged). Skipped with a printed
//! reason where PostgreSQL is not installed.
use crate::common;
use crate::replicas_common;

use std::time::{Duration, Instant};

use crate::replicas_common::{replica, Pg, Replica};
use serde_json::{json, Value};

async fn reply(url: &str, session: &str, text: &str) -> String {
    let r = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
        .post(format!("{url}/v1/chat/completions"))
        .header("x-plughost-session", session)
        .json(&json!({"messages": [{"role": "user", "content": text}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Logs `<pid> <session total>` for each call; with the file `crash` in
/// the test's home, removes it and ends its process at once, before
/// logging (a native crash, as far as plughost can tell).
const USAGE: &str = r#"
import os


class Usage:
    def __init__(self, config=None, **kwargs):
        pass

    async def register(self, bus):
        bus.on("onUsageTracked", self.usage)

    async def usage(self, agent, ctx, payload):
        home = os.environ["PLUGHOST_HOME_FOR_TEST"]
        crash = os.path.join(home, "crash")
        if os.path.exists(crash):
            os.remove(crash)
            os._exit(3)
        with open(os.path.join(home, "usage.log"), "a") as f:
            f.write(f"{os.getpid()} {payload['session_totals']['total_tokens']}\n")
"#;

/// A home with the Codumentor plugin `usage`, third-party (not trusted):
/// `serve` runs it in a worker process.
fn usage_home() -> tempfile::TempDir {
    let home = common::home_with(&["usage"]);
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

/// Each turn's call reports 11 tokens.
fn script(dir: &std::path::Path) -> std::path::PathBuf {
    let mut text = String::from("turns:\n");
    for _ in 0..20 {
        text.push_str("  - say: \"re: {user_message}\"\n    usage: {prompt_tokens: 10, completion_tokens: 1, total_tokens: 11}\n");
    }
    let path = dir.join("script.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `(pid, total)` of each logged call.
fn log(shared: &std::path::Path) -> Vec<(u32, i64)> {
    std::fs::read_to_string(shared.join("usage.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (pid, total) = l.split_once(' ').unwrap();
            (pid.parse().unwrap(), total.parse().unwrap())
        })
        .collect()
}

/// Wait for a line of `r`'s log containing `text`.
fn wait_for_log(r: &Replica, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match r.stderr.recv_timeout(left) {
            Ok(line) if line.contains(text) => return line,
            Ok(_) => {}
            Err(_) => panic!("the replica never logged {text:?}"),
        }
    }
}

async fn stored_total(pg: &Pg, key: &str) -> Value {
    let state: String = pg
        .client()
        .await
        .query_one(
            "SELECT state FROM plughost_sessions WHERE key = $1",
            &[&key],
        )
        .await
        .unwrap()
        .get(0);
    let state: Value = serde_json::from_str(&state).unwrap();
    state["codumentor"]["usage_totals"]["total_tokens"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_plugins_session_totals_go_on_on_another_replica_and_after_its_worker_is_killed(
) {
    let Some(pg) = Pg::start() else { return };
    let (shared, bundled) = (tempfile::tempdir().unwrap(), common::no_bundled());
    let script = script(shared.path());
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
    let calls = log(shared.path());
    let totals: Vec<i64> = calls.iter().map(|c| c.1).collect();
    // Without the state crossing, B's worker would start from 0 (11) and
    // A's would not see B's call (22).
    assert_eq!(totals, [11, 22, 33], "{calls:?}");
    let (worker_a, worker_b) = (calls[0].0, calls[1].0);
    assert_eq!(calls[2].0, worker_a, "A's calls ran in one worker");
    for pid in [worker_a, worker_b] {
        assert!(
            pid != a.child.id() && pid != b.child.id(),
            "the plugin ran in a worker process, not in a replica"
        );
    }
    assert_ne!(worker_a, worker_b);
    assert_eq!(stored_total(&pg, "s").await, 33);

    // A's worker killed between turns: its next process is handed the
    // stored totals.
    let killed = std::process::Command::new("kill")
        .args(["-9", &worker_a.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    wait_for_log(&a, "restarts for the next call");
    reply(&a.url, "s", "four").await;
    let calls = log(shared.path());
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert_ne!(calls[3].0, worker_a, "a new worker");
    assert_eq!(calls[3].1, 44, "{calls:?}");
    assert_eq!(stored_total(&pg, "s").await, 44);

    // Another session's totals are its own, in the same workers.
    reply(&b.url, "t", "one").await;
    assert_eq!(log(shared.path())[4].1, 11);
    assert_eq!(stored_total(&pg, "t").await, 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_before_reporting_loses_only_its_turns_count_and_the_turn_completes() {
    let Some(pg) = Pg::start() else { return };
    let (shared, bundled) = (tempfile::tempdir().unwrap(), common::no_bundled());
    let script = script(shared.path());
    let home = usage_home();
    let r = replica(
        home.path(),
        shared.path(),
        bundled.path(),
        &script,
        &pg.url,
        &[],
    );
    assert_eq!(reply(&r.url, "s", "one").await, "re: one");
    std::fs::write(shared.path().join("crash"), "").unwrap();
    // The worker dies in the hook: the turn still answers.
    assert_eq!(reply(&r.url, "s", "two").await, "re: two");
    let warning = wait_for_log(&r, "did not answer its");
    assert!(warning.contains("session 's'"), "{warning}");
    assert!(warning.contains("'usage'"), "{warning}");
    assert!(!shared.path().join("crash").exists());
    // What it had reported (turn one) is stored; turn two's count died
    // with the worker.
    assert_eq!(stored_total(&pg, "s").await, 11);
    reply(&r.url, "s", "three").await;
    let totals: Vec<i64> = log(shared.path()).iter().map(|c| c.1).collect();
    assert_eq!(totals, [11, 22]);
    assert_eq!(stored_total(&pg, "s").await, 22);
}

/// The same on one replica with the sessions in files (`<key>.jsonl.state`),
/// the plugin isolated and in-process: every turn's call is counted (a
/// later turn is never taken for the one counted last), and `/new` starts
/// the totals over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_turn_is_counted_and_stored_beside_the_transcript_isolated_or_not() {
    for trusted in [false, true] {
        let (shared, bundled) = (tempfile::tempdir().unwrap(), common::no_bundled());
        let script = script(shared.path());
        let home = usage_home();
        if trusted {
            let config =
                json!({"plugins": {"enabled": ["usage"], "disabled": [], "trusted": ["usage"]}});
            std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
        }
        let r = replicas_common::serve(
            home.path(),
            shared.path(),
            bundled.path(),
            &script,
            None,
            &[],
        );
        for text in ["one", "two", "three"] {
            reply(&r.url, "s", text).await;
        }
        let calls = log(shared.path());
        let totals: Vec<i64> = calls.iter().map(|c| c.1).collect();
        assert_eq!(totals, [11, 22, 33], "trusted: {trusted}");
        assert_eq!(
            calls[0].0 == r.child.id(),
            trusted,
            "in-process only when trusted"
        );
        let state = std::fs::read_to_string(home.path().join("sessions/s.jsonl.state")).unwrap();
        let state: Value = serde_json::from_str(&state).unwrap();
        assert_eq!(state["codumentor"]["usage_totals"]["total_tokens"], 33);
        // `/new` starts the totals over with the transcript, in the worker too.
        reply(&r.url, "s", "/new").await;
        reply(&r.url, "s", "four").await;
        assert_eq!(log(shared.path())[3].1, 11, "trusted: {trusted}");
    }
}
