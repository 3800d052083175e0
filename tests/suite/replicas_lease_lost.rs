//! A turn that runs past its session's lease, which another replica then
//! takes: nothing of the turn is stored, and the client is told so (409
//! `session_lease_lost`, never a 200 for a turn the session will not
//! have), with or without an Idempotency-Key; the turn sent again runs.
//! Skipped with a printed reason where PostgreSQL is not installed.
use crate::common;
use crate::replicas_common::{replica, Pg};

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// A tool that says it started (a file `started`) and holds its turn
/// until the test lets it go (a file `go`) in the directory it is given.
const HOLDER: &str = r#"
import os
import time


def _hold(dir=""):
    open(os.path.join(dir, "started"), "w").close()
    for _ in range(6000):
        if os.path.exists(os.path.join(dir, "go")):
            os.remove(os.path.join(dir, "go"))
            os.remove(os.path.join(dir, "started"))
            return "held"
        time.sleep(0.005)
    return "never let go"


def register(ctx):
    ctx.register_tool(
        "hold",
        {"type": "object", "properties": {"dir": {"type": "string"}}},
        _hold,
        description="Hold the turn until the test lets it go",
    )
"#;

/// Each turn calls `hold`, then answers.
fn holding_script(dir: &Path, gate: &Path, turns: usize) -> std::path::PathBuf {
    let mut text = String::from("turns:\n");
    for _ in 0..turns {
        text.push_str(&format!(
            "  - tool_calls:\n      - name: hold\n        args: {{dir: \"{}\"}}\n  - say: \"done: {{tool_results}}\"\n",
            gate.display()
        ));
    }
    let path = dir.join("script.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn chat(url: &str, key: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
        .post(format!("{url}/v1/chat/completions"))
        .header("x-plughost-session", "s")
        .json(&serde_json::json!({"messages": [{"role": "user", "content": "hello"}]}));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.send().await.unwrap()
}

async fn wait_for(file: &Path) {
    for _ in 0..6000 {
        if file.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{} never appeared", file.display());
}

async fn stored(pg: &Pg) -> i64 {
    pg.client()
        .await
        .query_one(
            "SELECT count(*) FROM plughost_messages WHERE key = 's' AND archived IS NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// One turn of session `s` whose lease another replica takes while its
/// tool holds it; the answer it got, and the session's messages after.
async fn turn_losing_its_lease(pg: &Pg, url: &str, gate: &Path, key: Option<&str>) -> (u16, Value) {
    let url_owned = url.to_string();
    let key_owned = key.map(str::to_string);
    let turn = tokio::spawn(async move { chat(&url_owned, key_owned.as_deref()).await });
    wait_for(&gate.join("started")).await;
    // Another replica took the session (this turn's lease ran out).
    pg.client()
        .await
        .execute(
            "UPDATE plughost_leases SET owner = 'elsewhere#1', expires_at = now() + interval '1 minute' WHERE key = 's'",
            &[],
        )
        .await
        .unwrap();
    std::fs::write(gate.join("go"), "").unwrap();
    let answer = turn.await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

/// The other replica's turn ended: it released the session.
async fn released_elsewhere(pg: &Pg) {
    pg.client()
        .await
        .execute("DELETE FROM plughost_leases WHERE key = 's'", &[])
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_lease_was_taken_is_answered_409_and_stores_nothing() {
    let Some(pg) = Pg::start() else {
        return;
    };
    let home = common::home_with(&["holder"]);
    let plugin = home.path().join("plugins/holder");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(plugin.join("plugin.yaml"), "name: holder\n").unwrap();
    std::fs::write(plugin.join("__init__.py"), HOLDER).unwrap();
    let (shared, bundled, gate) = (
        tempfile::tempdir().unwrap(),
        common::no_bundled(),
        tempfile::tempdir().unwrap(),
    );
    let script = holding_script(shared.path(), gate.path(), 8);
    let r = replica(
        home.path(),
        shared.path(),
        bundled.path(),
        &script,
        &pg.url,
        &["--lease-wait", "5"],
    );

    // Without an Idempotency-Key.
    let (status, error) = turn_losing_its_lease(&pg, &r.url, gate.path(), None).await;
    assert_eq!(status, 409, "{error}");
    assert_eq!(error["error"]["code"], "session_lease_lost", "{error}");
    assert_eq!(
        stored(&pg).await,
        0,
        "a turn without its lease stored messages"
    );
    released_elsewhere(&pg).await;

    // With one: no answer is kept for it, so the same key runs the turn
    // again rather than replaying a 200 whose messages were never stored.
    let (status, error) = turn_losing_its_lease(&pg, &r.url, gate.path(), Some("k-1")).await;
    assert_eq!(status, 409, "{error}");
    assert_eq!(stored(&pg).await, 0);
    released_elsewhere(&pg).await;
    let again = tokio::spawn({
        let url = r.url.clone();
        async move { chat(&url, Some("k-1")).await }
    });
    // The turn runs again (its tool starts), where a kept answer would be
    // replayed at once.
    while !gate.path().join("started").exists() {
        if again.is_finished() {
            let answer = again.await.unwrap();
            panic!(
                "the retry did not run the turn: {} {:?}",
                answer.status(),
                answer.headers()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    std::fs::write(gate.path().join("go"), "").unwrap();
    let again = again.await.unwrap();
    assert_eq!(again.status(), 200);
    assert!(
        !again.headers().contains_key("idempotent-replayed"),
        "the lost turn's answer was replayed"
    );
    let body: Value = again.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "done: held");
    // The session has that turn, once: the user's message, the tool call,
    // its result and the answer.
    assert_eq!(stored(&pg).await, 4);
}
