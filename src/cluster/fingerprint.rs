//! The fingerprint of a replica's plugin set: every loaded plugin's key,
//! version, dialect and content hash (its files), and the home's
//! `config.json` (plugin settings change behaviour), in one sha256. The
//! first replica records it in `plughost_cluster`; a replica that loads
//! another set says so at start and in `/healthz`, so a rolling update
//! half done, or a replica with a stale plugin, is seen.

use sha2::{Digest, Sha256};

use super::db::DbError;
use super::Cluster;
use crate::host::Host;

/// A replica's fingerprint against the cluster's recorded one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub ours: String,
    /// The cluster's, as recorded by the first replica (ours when we were).
    pub cluster: String,
    /// The replica that recorded it.
    pub recorded_by: String,
}

impl Check {
    pub fn matches(&self) -> bool {
        self.ours == self.cluster
    }
}

/// `sha256:<hex>` of `host`'s loaded plugin set.
pub fn of(host: &Host) -> String {
    let mut lines: Vec<String> = host
        .plugins()
        .iter()
        .filter(|p| p.loaded)
        .map(|p| {
            let content = crate::plugins::lock::content_hash(&p.path)
                .map(|c| c.hash)
                .unwrap_or_else(|_| "unhashed".into());
            let dialect = p.dialect.map(|d| d.as_str()).unwrap_or("native");
            format!("{}\t{}\t{dialect}\t{content}", p.key, p.version)
        })
        .collect();
    lines.sort();
    let mut h = Sha256::new();
    for line in &lines {
        h.update(line.as_bytes());
        h.update(b"\n");
    }
    if let Ok(config) = std::fs::read(host.home().join("config.json")) {
        h.update(b"config.json\n");
        h.update(&config);
    }
    format!("sha256:{}", hex(&h.finalize()))
}

impl Cluster {
    /// Record `ours` as the cluster's fingerprint when none is, and
    /// compare it with the recorded one otherwise. Remembered for
    /// [`fingerprint`](Self::fingerprint).
    pub async fn check_fingerprint(&self, ours: String) -> Result<Check, DbError> {
        let (o, by) = (ours.clone(), self.replica().to_string());
        let (cluster, recorded_by) = self
            .db()
            .run(move |c| async move {
                c.execute(
                    "INSERT INTO plughost_cluster (name, value, set_by) VALUES ('plugin_fingerprint', $1, $2) \
                     ON CONFLICT DO NOTHING",
                    &[&o, &by],
                )
                .await?;
                let row = c
                    .query_one(
                        "SELECT value, set_by FROM plughost_cluster WHERE name = 'plugin_fingerprint'",
                        &[],
                    )
                    .await?;
                Ok((row.get::<_, String>(0), row.get::<_, String>(1)))
            })
            .await?;
        let check = Check {
            ours,
            cluster,
            recorded_by,
        };
        let _ = self.fingerprint.set(check.clone());
        Ok(check)
    }

    /// The check made at start, if any.
    pub fn fingerprint(&self) -> Option<&Check> {
        self.fingerprint.get()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
