//! A session's lease kept by its replica between turns (`src/cluster/keep.rs`):
//! given up to another replica that asks (`replicas_statements` alternates
//! two), freed when the replica shuts down, and taken with a statement by
//! its own next turn once too near its expiry to be taken over as it is.
//! Each test makes the lease outlive the wait a request is allowed, so a
//! lease freed only by expiring would answer 409.
use std::time::{Duration, Instant};

use crate::replicas_common::{echo_script, replica, two_replicas, Pg};

use crate::replicas_common::post_chat as post;

/// The lease row of `key`: `(owner, unexpired)`.
async fn lease_row(pg: &Pg, key: &str) -> (Option<String>, bool) {
    let row = pg
        .client()
        .await
        .query_one(
            "SELECT owner, expires_at > now() FROM plughost_leases WHERE key = $1",
            &[&key],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_shut_down_frees_the_sessions_it_kept() {
    let Some(pg) = Pg::start() else { return };
    let (mut a, b, _dirs) = two_replicas(&pg, &["--lease-ttl", "60", "--lease-wait", "2"]);
    assert_eq!(post(&a.url, "s", "one").await.status(), 200);
    let (owner, unexpired) = lease_row(&pg, "s").await;
    assert!(owner.is_some() && unexpired, "kept after the turn");
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &a.child.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let exit = a.child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    assert_eq!(lease_row(&pg, "s").await.0, None, "freed at shutdown");
    let next = post(&b.url, "s", "two").await;
    assert_eq!(next.status(), 200, "{}", next.text().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_lease_near_its_expiry_is_taken_again_by_its_own_replica() {
    let Some(pg) = Pg::start() else { return };
    let shared = tempfile::tempdir().unwrap();
    let bundled = crate::common::no_bundled();
    let home = crate::common::home_with(&[]);
    let script = echo_script(shared.path(), 40);
    // Taken over as it is for half a second after a turn; expired after
    // one and a half; a request waits at most 0.3 s.
    let r = replica(
        home.path(),
        shared.path(),
        bundled.path(),
        &script,
        &pg.url,
        &["--lease-ttl", "1.5", "--lease-wait", "0.3"],
    );
    // On a machine slow enough that the lease expires before the second
    // turn starts, there is nothing to show: try again on a new session.
    for attempt in 0..5 {
        let key = format!("s{attempt}");
        assert_eq!(post(&r.url, &key, "one").await.status(), 200);
        let answered = Instant::now();
        tokio::time::sleep(Duration::from_millis(700)).await;
        let (owner, unexpired) = lease_row(&pg, &key).await;
        assert!(owner.is_some(), "kept after the turn");
        if !unexpired || answered.elapsed() > Duration::from_millis(1200) {
            continue;
        }
        let next = post(&r.url, &key, "two").await;
        assert_eq!(next.status(), 200, "{}", next.text().await.unwrap());
        return;
    }
    panic!("the kept lease expired before the second turn five times over");
}
