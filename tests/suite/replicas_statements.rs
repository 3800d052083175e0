//! How many statements a chat request on a named session costs the
//! PostgreSQL session store (issue 51: 11 per request made the store a
//! seventh of the file store's pace; the goal was at most 4). One replica
//! serving a session turn after turn takes one: the turn's end, which
//! stores the turn and keeps the lease for the replica, so the next turn
//! takes it over without a statement and, nobody else having been able to
//! write the session, reads nothing. Counted by the server itself
//! (`log_statement = all`) between two marker statements of the test's.
use crate::replicas_common::{echo_script, replica, two_replicas, Pg, Replica};

use serde_json::json;

/// The statements the server logged between the markers `from` and `to`,
/// the test's own (the markers) left out.
fn logged_between(log: &str, from: &str, to: &str) -> Vec<String> {
    let start = log.find(from).expect("the first marker is logged");
    let end = log[start..].find(to).expect("the second marker is logged") + start;
    // The second marker's whole line is left out.
    let end = log[..end].rfind('\n').unwrap_or(end);
    log[start..end]
        .lines()
        .skip(1)
        .filter(|l| l.contains("LOG:  execute") || l.contains("LOG:  statement:"))
        .filter(|l| !l.contains("plughost-test-marker"))
        .map(str::to_string)
        .collect()
}

/// A client of `pg` once every backend logs its statements.
async fn logging_statements(pg: &Pg) -> tokio_postgres::Client {
    let db = pg.client().await;
    db.batch_execute("ALTER SYSTEM SET log_statement = 'all'")
        .await
        .unwrap();
    db.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    // The setting reaches every backend at its next command; a marker
    // proves this one logs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !pg.log().contains("plughost-test-marker-probe") {
        assert!(
            std::time::Instant::now() < deadline,
            "log_statement never applied"
        );
        let _ = db.simple_query("SELECT 'plughost-test-marker-probe'").await;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    db
}

/// The statements logged since the test's start marker, ending it.
async fn since_start_marker(pg: &Pg, db: &tokio_postgres::Client) -> Vec<String> {
    db.simple_query("SELECT 'plughost-test-marker-end'")
        .await
        .unwrap();
    let mut statements = Vec::new();
    crate::common::wait_until(
        "the end marker in the log",
        std::time::Duration::from_secs(30),
        || {
            let log = pg.log();
            if log.contains("plughost-test-marker-end") {
                statements = logged_between(
                    &log,
                    "plughost-test-marker-start",
                    "plughost-test-marker-end",
                );
                true
            } else {
                false
            }
        },
    );
    statements
}

/// One replica on `pg`, the scripted model echoing; the directories it
/// uses live as long as the second value.
fn one_replica(pg: &Pg) -> (Replica, [tempfile::TempDir; 2]) {
    let home = crate::common::home_with(&[]);
    let bundled = crate::common::no_bundled();
    let script = echo_script(home.path(), 40);
    let server = replica(
        home.path(),
        home.path(),
        bundled.path(),
        &script,
        &pg.url,
        &[],
    );
    (server, [home, bundled])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_request_on_a_named_session_takes_one_statement() {
    let Some(pg) = Pg::start() else { return };
    let (server, _dirs) = one_replica(&pg);
    let http = reqwest::Client::new();
    let chat = |text: String| {
        let (http, url) = (http.clone(), server.url.clone());
        async move {
            let r = http
                .post(format!("{url}/v1/chat/completions"))
                .header("x-plughost-session", "counted")
                .json(&json!({"messages": [{"role": "user", "content": text}]}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    // The session is loaded on this replica (its first request reads it whole).
    chat("first".into()).await;
    let db = logging_statements(&pg).await;
    const REQUESTS: usize = 10;
    db.simple_query("SELECT 'plughost-test-marker-start'")
        .await
        .unwrap();
    for i in 0..REQUESTS {
        let answer = chat(format!("m{i}")).await;
        assert!(
            answer.to_string().contains(&format!("re: m{i}")),
            "{answer}"
        );
    }
    let statements = since_start_marker(&pg, &db).await;
    let per_request = statements.len() as f64 / REQUESTS as f64;
    eprintln!("{per_request} statements per request");
    // The release that stores the turn's messages and keeps the lease
    // (issue 51 asked for at most four).
    assert!(
        per_request <= 1.0,
        "{per_request} statements per request:\n{}",
        statements.join("\n")
    );
}

/// A replica that skips reading a session (nobody wrote it since its own
/// last turn) still reads what another replica wrote in between: each
/// reply says how many messages its model call was sent, which grows by
/// two a turn whichever replica runs it. The replica keeping the session's
/// lease between turns frees it when the other asks: with leases living a
/// minute and requests waiting at most five seconds, a lease that was only
/// freed by expiring would answer 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_skips_the_read_still_sees_another_replicas_turns() {
    let Some(pg) = Pg::start() else { return };
    let (a, b, _dirs) = two_replicas(&pg, &["--lease-ttl", "60", "--lease-wait", "5"]);
    let http = reqwest::Client::new();
    let order = [&a, &a, &b, &a, &a, &b, &b, &a];
    for (turn, replica) in order.iter().enumerate() {
        let r = http
            .post(format!("{}/v1/chat/completions", replica.url))
            .header("x-plughost-session", "shared")
            .json(&json!({"messages": [{"role": "user", "content": format!("m{turn}")}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "turn {turn}: {}", r.text().await.unwrap());
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            v["choices"][0]["message"]["content"],
            format!("re: m{turn} after {}", 2 * turn + 1),
            "turn {turn}"
        );
    }
}

/// Sixteen clients at once, each moving to a new session every third
/// turn (a new session is read whole, from synchronous code, while turns
/// hold their leases from async code): every request is answered. A
/// worker thread parked on the sessions' lock while the lock's holder
/// waited for a connection only that runtime drove once hung `serve` here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_clients_moving_between_sessions_are_all_answered() {
    let Some(pg) = Pg::start() else { return };
    let (server, _dirs) = one_replica(&pg);
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    let clients: Vec<_> = (0..16)
        .map(|c| {
            let (http, url) = (http.clone(), server.url.clone());
            tokio::spawn(async move {
                for turn in 0..24 {
                    let r = http
                        .post(format!("{url}/v1/chat/completions"))
                        .header("x-plughost-session", format!("c{c}-{}", turn / 3))
                        .json(
                            &json!({"messages": [{"role": "user", "content": format!("m{turn}")}]}),
                        )
                        .send()
                        .await
                        .expect("answered within a minute");
                    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
                }
            })
        })
        .collect();
    for c in clients {
        c.await.unwrap();
    }
}

/// Turns of different sessions ending together are stored together: one
/// statement for several releases (group commit), each release still
/// fenced by its own lease and stored whole, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_of_sessions_ending_together_share_statements() {
    let Some(pg) = Pg::start() else { return };
    let (server, _dirs) = one_replica(&pg);
    let http = reqwest::Client::new();
    const SESSIONS: usize = 16;
    const TURNS: usize = 8;
    async fn turn(http: reqwest::Client, url: String, session: usize, text: String) {
        let r = http
            .post(format!("{url}/v1/chat/completions"))
            .header("x-plughost-session", format!("g{session}"))
            .json(&json!({"messages": [{"role": "user", "content": text}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    // Each session loaded here (a first request reads it whole).
    for s in 0..SESSIONS {
        turn(http.clone(), server.url.clone(), s, "first".into()).await;
    }
    let db = logging_statements(&pg).await;
    db.simple_query("SELECT 'plughost-test-marker-start'")
        .await
        .unwrap();
    let clients: Vec<_> = (0..SESSIONS)
        .map(|s| {
            let (http, url) = (http.clone(), server.url.clone());
            tokio::spawn(async move {
                for t in 0..TURNS {
                    turn(http.clone(), url.clone(), s, format!("g{s}-{t}")).await;
                }
            })
        })
        .collect();
    for c in clients {
        c.await.unwrap();
    }
    let statements = since_start_marker(&pg, &db).await;
    let releases = statements
        .iter()
        .filter(|l| l.contains("INSERT INTO plughost_messages"))
        .count();
    eprintln!("{} turns stored by {releases} statements", SESSIONS * TURNS);
    assert!(
        releases < SESSIONS * TURNS,
        "no two releases shared a statement:\n{}",
        statements.join("\n")
    );
    for s in 0..SESSIONS {
        let rows = db
            .query(
                "SELECT body FROM plughost_messages WHERE key = $1 AND NOT pending ORDER BY seq",
                &[&format!("g{s}")],
            )
            .await
            .unwrap();
        let texts: Vec<String> = rows
            .iter()
            .map(|r| {
                let v: serde_json::Value = serde_json::from_str(r.get(0)).unwrap();
                v["content"].as_str().unwrap_or_default().to_string()
            })
            .collect();
        let mut expected = vec!["first".to_string(), "re: first".to_string()];
        for t in 0..TURNS {
            expected.push(format!("g{s}-{t}"));
            expected.push(format!("re: g{s}-{t}"));
        }
        assert_eq!(texts, expected, "session g{s}");
    }
}
