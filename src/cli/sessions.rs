//! `serve --sessions postgres://…` (one replica of a cluster) and
//! `plughost sessions move --to postgres://…` (file sessions into it).

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::exit::{Exit, Failure};
use super::Cli;
use crate::agent::session::pg::PgSessions;
use crate::agent::session::SessionBackend;
use crate::agent::Agent;
use crate::cluster::Cluster;
use crate::serve::replicas::Replicas;

fn seconds(value: &str) -> Result<Duration, String> {
    let secs: f64 = value
        .parse()
        .map_err(|_| format!("'{value}' is not a number of seconds"))?;
    if !(0.1..=86_400.0).contains(&secs) {
        return Err(format!("{value}: give 0.1 to 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `plughost serve`'s cluster options.
#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Keep named sessions in PostgreSQL (postgres://user@host:port/db),
    /// shared with the other replicas; the server applies its schema. Else
    /// the files under <home>/sessions.
    #[arg(long, value_name = "URL")]
    pub sessions: Option<String>,
    /// Seconds a session's lease lives unless renewed (a killed replica's
    /// sessions are free again after at most this).
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = seconds)]
    pub lease_ttl: Duration,
    /// Seconds a request waits for a session another replica is running
    /// before it is answered 409 with Retry-After.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = seconds)]
    pub lease_wait: Duration,
}

/// `plughost sessions …`.
#[derive(Subcommand, Debug)]
pub enum SessionsCmd {
    /// Move the home's file sessions into PostgreSQL. A session already
    /// there is left alone (and its file kept); a moved one's transcript
    /// is renamed <key>.jsonl.moved.
    Move {
        /// The database (postgres://user@host:port/db).
        #[arg(long, value_name = "URL")]
        to: String,
    },
}

/// Join the cluster at `args.sessions` (if given) and record what serve
/// shows of it: the agent's named sessions go to PostgreSQL, the plugin
/// set's fingerprint is checked against the cluster's.
pub fn join(
    rt: &tokio::runtime::Runtime,
    agent: &Agent,
    args: &ClusterArgs,
) -> Result<Replicas, Failure> {
    let fingerprint = crate::cluster::fingerprint::of(agent.host());
    let Some(url) = &args.sessions else {
        return Ok(Replicas {
            fingerprint,
            shared: None,
            lease_wait: args.lease_wait,
        });
    };
    let cluster =
        Cluster::connect(url, args.lease_ttl).map_err(|e| Failure::failed(e.to_string()))?;
    let check = rt
        .block_on(cluster.check_fingerprint(fingerprint.clone()))
        .map_err(|e| Failure::failed(e.to_string()))?;
    if check.matches() {
        eprintln!(
            "plughost serve: sessions in {} (plugin set {}, the same as the cluster's)",
            cluster.url(),
            check.ours
        );
    } else {
        eprintln!(
            "plughost serve: warning: this replica's plugin set ({}) differs from the cluster's ({}, recorded by {}): \
             install the same plugins on every replica",
            check.ours, check.cluster, check.recorded_by
        );
    }
    let pg = Arc::new(PgSessions::new(cluster.clone()));
    agent.sessions().use_backend(pg.clone());
    Ok(Replicas {
        fingerprint,
        shared: Some((cluster, pg)),
        lease_wait: args.lease_wait,
    })
}

/// `plughost sessions move --to URL`.
pub fn run(cli: &Cli, command: &SessionsCmd) -> Result<Exit, Failure> {
    let SessionsCmd::Move { to } = command;
    let dir = super::home_of(cli).join("sessions");
    let cluster = Cluster::connect(to, crate::cluster::DEFAULT_LEASE_TTL)
        .map_err(|e| Failure::failed(e.to_string()))?;
    let pg = PgSessions::new(cluster.clone());
    let (mut moved, mut kept) = (0, 0);
    for (key, path) in file_sessions(&dir)? {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Failure::failed(format!("{}: {e}", path.display())))?;
        let lines: Vec<String> = text
            .lines()
            .filter(|l| serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v.is_object()))
            .map(str::to_string)
            .collect();
        // The dialects' per-session state beside it (`<transcript>.state`).
        let mut state_path = path.clone().into_os_string();
        state_path.push(".state");
        let state_path = std::path::PathBuf::from(state_path);
        let state = match std::fs::read_to_string(&state_path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Failure::failed(format!("{}: {e}", state_path.display()))),
        };
        let imported = pg
            .import(&key, &lines, state.as_deref())
            .map_err(|e| Failure::failed(format!("session '{key}': {e}")))?;
        if imported {
            for file in [&path, &state_path].into_iter().filter(|p| p.exists()) {
                let mut done = file.clone().into_os_string();
                done.push(".moved");
                std::fs::rename(file, &done)
                    .map_err(|e| Failure::failed(format!("{}: {e}", file.display())))?;
            }
            println!("moved {key} ({} messages)", lines.len());
            moved += 1;
        } else {
            println!(
                "kept {key}: {} has a session of that name already",
                cluster.url()
            );
            kept += 1;
        }
    }
    println!(
        "{moved} session(s) moved to {}, {kept} left in {}",
        cluster.url(),
        dir.display()
    );
    Ok(Exit::Success)
}

/// The `(key, path)` of every transcript in `dir` (archived ones, side
/// files and locks left out), the key decoded from its file stem.
fn file_sessions(dir: &std::path::Path) -> Result<Vec<(String, std::path::PathBuf)>, Failure> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Failure::failed(format!("{}: {e}", dir.display()))),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".jsonl") else {
            continue;
        };
        // `<key>.<millis>.jsonl` is an archive of a reset session.
        let archived = stem
            .rsplit_once('.')
            .is_some_and(|(_, t)| t.len() >= 12 && t.bytes().all(|b| b.is_ascii_digit()));
        if archived || stem.starts_with('.') || !entry.path().is_file() {
            continue;
        }
        if let Some(key) = key_of(stem) {
            found.push((key, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// The session key a file stem was made from ([`crate::agent::session::file_stem`]).
fn key_of(stem: &str) -> Option<String> {
    if stem == "%" {
        return Some(String::new());
    }
    let bytes = stem.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = stem.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::key_of;
    use crate::agent::session::file_stem;

    #[test]
    fn file_stems_decode_to_their_keys() {
        for key in ["plain", "a/b c", ".hidden", "", "é"] {
            assert_eq!(key_of(&file_stem(key)).as_deref(), Some(key));
        }
    }
}
