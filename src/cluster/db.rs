//! The PostgreSQL connection a replica shares between its sessions, leases,
//! idempotency records and scheduled-task claims, and the schema the server
//! applies to it itself.
//!
//! The connection lives on a thread of its own with its own Tokio runtime:
//! a session's transcript is written from synchronous code
//! ([`Session::append`](crate::agent::session::Session::append)) that may
//! run on any runtime, a current-thread one included, and waits there for
//! its row without blocking the runtime the connection needs.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::{Client, NoTls};

/// Why the cluster's database could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("cannot connect to PostgreSQL at {url}: {source}")]
    Connect {
        url: String,
        source: tokio_postgres::Error,
    },
    #[error("cannot apply plughost's schema (migration {version}): {source}")]
    Migrate {
        version: i32,
        source: tokio_postgres::Error,
    },
    #[error("PostgreSQL: {0}")]
    Query(#[from] tokio_postgres::Error),
    #[error("the PostgreSQL connection thread has stopped")]
    Gone,
}

/// The schema, one migration per entry, applied in order and recorded in
/// `plughost_migrations`. Never edit an applied entry: add one.
const MIGRATIONS: &[&str] = &[
    // 1: sessions, their messages, leases, idempotency, cron claims, cluster facts.
    r#"
    CREATE TABLE plughost_sessions (
        key text PRIMARY KEY,
        started boolean NOT NULL DEFAULT false,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE plughost_messages (
        seq bigserial PRIMARY KEY,
        key text NOT NULL,
        turn text,
        pending boolean NOT NULL DEFAULT false,
        archived bigint,
        body text NOT NULL
    );
    CREATE INDEX plughost_messages_key ON plughost_messages (key, seq) WHERE archived IS NULL;
    CREATE TABLE plughost_leases (
        key text PRIMARY KEY,
        owner text NOT NULL,
        expires_at timestamptz NOT NULL
    );
    CREATE TABLE plughost_idempotency (
        key text PRIMARY KEY,
        request_hash text NOT NULL,
        owner text NOT NULL,
        claimed_until timestamptz NOT NULL,
        expires_at timestamptz NOT NULL,
        status integer,
        response text
    );
    CREATE TABLE plughost_cron_ticks (
        task text NOT NULL,
        tick bigint NOT NULL,
        owner text NOT NULL,
        claimed_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (task, tick)
    );
    CREATE TABLE plughost_cluster (
        name text PRIMARY KEY,
        value text NOT NULL,
        set_by text NOT NULL,
        set_at timestamptz NOT NULL DEFAULT now()
    );
    "#,
];

/// One replica's connection to the cluster's database.
pub struct Db {
    client: Arc<Client>,
    runtime: tokio::runtime::Handle,
    /// Dropping it stops the connection thread.
    _stop: std::sync::mpsc::SyncSender<()>,
}

impl Db {
    /// Connect to `url` (`postgres://user@host:port/db`) and apply the
    /// migrations this build knows and the database lacks.
    pub fn connect(url: &str) -> Result<Arc<Db>, DbError> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::sync_channel::<()>(0);
        let owned = url.to_string();
        std::thread::Builder::new()
            .name("plughost-pg".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(_) => return,
                };
                let connected = rt.block_on(tokio_postgres::connect(&owned, NoTls));
                let (client, connection) = match connected {
                    Ok(pair) => pair,
                    Err(source) => {
                        let _ = ready_tx.send(Err(DbError::Connect { url: owned, source }));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok((client, rt.handle().clone())));
                rt.spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::error!("the PostgreSQL connection ended: {e}");
                    }
                });
                // Keep the runtime turning until the Db is dropped.
                rt.block_on(async move {
                    let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
                });
            })
            .map_err(|_| DbError::Gone)?;
        let (client, runtime) = ready_rx.recv().map_err(|_| DbError::Gone)??;
        let db = Arc::new(Db {
            client: Arc::new(client),
            runtime,
            _stop: stop_tx,
        });
        db.block(|c| async move { migrate(&c).await })?;
        Ok(db)
    }

    /// Run `job` on the connection's runtime and wait for it from any
    /// thread (synchronous code, or a task of another runtime).
    pub fn block<T, F, Fut>(&self, job: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: std::future::Future<Output = Result<T, DbError>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let fut = job(self.client.clone());
        self.runtime.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().map_err(|_| DbError::Gone)?
    }

    /// Run `job` on the connection's runtime and await it from async code.
    pub async fn run<T, F, Fut>(&self, job: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: std::future::Future<Output = Result<T, DbError>> + Send + 'static,
    {
        let fut = job(self.client.clone());
        match self.runtime.spawn(fut).await {
            Ok(result) => result,
            Err(_) => Err(DbError::Gone),
        }
    }

    /// Start `job` on the connection's runtime without waiting for it.
    pub fn spawn<F>(&self, job: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.runtime.spawn(job);
    }

    /// The connection, for jobs given to [`spawn`](Self::spawn).
    pub fn client(&self) -> Arc<Client> {
        self.client.clone()
    }
}

/// Apply the missing migrations in one transaction under an advisory lock,
/// so replicas starting together neither race nor apply one twice. Runs
/// before anything else uses the connection.
async fn migrate(client: &Client) -> Result<(), DbError> {
    let failed = |version, source| DbError::Migrate { version, source };
    client
        .batch_execute(
            "BEGIN; SELECT pg_advisory_xact_lock(2525); \
             CREATE TABLE IF NOT EXISTS plughost_migrations (\
             version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .map_err(|e| failed(0, e))?;
    for (i, sql) in MIGRATIONS.iter().enumerate() {
        let version = i as i32 + 1;
        let applied = client
            .query_opt(
                "SELECT 1 FROM plughost_migrations WHERE version = $1",
                &[&version],
            )
            .await
            .map_err(|e| failed(version, e))?;
        if applied.is_some() {
            continue;
        }
        let batch = format!("{sql}; INSERT INTO plughost_migrations (version) VALUES ({version})");
        if let Err(e) = client.batch_execute(&batch).await {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(failed(version, e));
        }
    }
    client
        .batch_execute("COMMIT")
        .await
        .map_err(|e| failed(0, e))
}

/// A lease or claim's time to live as PostgreSQL's interval text.
pub(crate) fn interval(d: Duration) -> String {
    format!("{} milliseconds", d.as_millis())
}
