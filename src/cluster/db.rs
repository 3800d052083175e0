//! The PostgreSQL connection a replica shares between its sessions, leases,
//! idempotency records and scheduled-task claims, and the schema the server
//! applies to it itself.
//!
//! The connections ([`Db`]) have a thread of their own with its own Tokio
//! runtime: a session's transcript is written from synchronous code
//! ([`Session::append`](crate::agent::session::Session::append)) that may
//! run on any runtime, a current-thread one included, and waits there for
//! its row without blocking the runtime the connection needs. Async code on
//! a multi-threaded runtime (`serve`'s turns) runs its statements on that
//! runtime instead, over a second pool of connections driven there: a
//! synchronous caller never waits for one of those (a worker parked on a
//! lock while the lock's holder waits for a connection only a parked
//! runtime could drive was a deadlock).

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
    /// No connection could be had (the server is down or restarting): a
    /// request is answered "retry" (HTTP 503), and the next use connects again.
    #[error("PostgreSQL is unavailable: {0}")]
    Unavailable(String),
    #[error("cannot connect to PostgreSQL at {url}: {why}")]
    Unreachable { url: String, why: String },
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
    // 2: the dialects' per-session state (a JSON object by dialect), beside
    // the transcript, so a session resumed on another replica keeps it.
    r#"
    ALTER TABLE plughost_sessions ADD COLUMN state text;
    -- A turn's start and end find its pending messages without reading
    -- the session's others.
    CREATE INDEX plughost_messages_pending ON plughost_messages (key) WHERE pending;
    "#,
    // 3: a lease row outlives its turn (released: no owner, expired) and
    // names the turn that last released it having stored what it wrote,
    // so the replica that ran that turn knows, when it takes the lease
    // again, that nobody wrote the session since and skips reading it; and
    // the owner it was taken from, so a turn deletes a dead turn's pending
    // messages only when there was one.
    r#"
    ALTER TABLE plughost_leases ALTER COLUMN owner DROP NOT NULL;
    ALTER TABLE plughost_leases ADD COLUMN last_turn text;
    ALTER TABLE plughost_leases ADD COLUMN taken_from text;
    "#,
    // 4: one index on a session's messages where there were two: the
    // primary key is (key, seq), which a read by session walks in order,
    // and an insert maintains one index a message instead of two (a turn's
    // release about a tenth faster with pgbench). A read now passes over
    // the session's archived rows, which only compaction and /new leave.
    r#"
    ALTER TABLE plughost_messages DROP CONSTRAINT plughost_messages_pkey;
    ALTER TABLE plughost_messages ADD PRIMARY KEY (key, seq);
    DROP INDEX plughost_messages_key;
    "#,
];

/// A connection of the pool, for one job (a query or a few).
pub type Conn = deadpool_postgres::Object;

/// How many connections each of a replica's two pools opens at most: turns
/// of different sessions do not wait behind one another's statements on
/// one backend.
const POOL_SIZE: usize = 8;

/// How long connecting (or waiting for a free connection) may take before
/// the request is answered "unavailable, retry" instead of hanging.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One replica's connections to the cluster's database: a pool that drops
/// a connection the server closed (a restart) and opens a new one on the
/// next use, so the replica recovers by itself once PostgreSQL is back.
pub struct Db {
    /// Connections driven by the connection thread, for synchronous callers
    /// ([`block`](Self::block)) and work on that thread.
    pool: deadpool_postgres::Pool,
    /// Connections driven by the multi-threaded runtime of the async callers
    /// that opened them ([`run`](Self::run) from `serve`'s turns). Kept
    /// apart from `pool`: a synchronous caller parked on a worker of that
    /// runtime must never wait for a connection only that runtime drives.
    near_pool: deadpool_postgres::Pool,
    runtime: tokio::runtime::Handle,
    /// Where the server is, for a connection of its own ([`listen`](Self::listen)).
    config: tokio_postgres::Config,
    /// Dropping it stops the connection thread.
    _stop: std::sync::mpsc::SyncSender<()>,
}

impl Db {
    /// Connect to `url` (`postgres://user@host:port/db`) and apply the
    /// migrations this build knows and the database lacks.
    pub fn connect(url: &str) -> Result<Arc<Db>, DbError> {
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|source| DbError::Connect {
                url: url.to_string(),
                source,
            })?;
        config.connect_timeout(CONNECT_TIMEOUT);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::sync_channel::<()>(0);
        std::thread::Builder::new()
            .name("plughost-pg".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                let _ = ready_tx.send(rt.handle().clone());
                // Keep the runtime turning until the Db is dropped.
                rt.block_on(async move {
                    let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
                });
            })
            .map_err(|_| DbError::Gone)?;
        let runtime = ready_rx.recv().map_err(|_| DbError::Gone)?;
        let db = Arc::new(Db {
            pool: pool_of(config.clone())?,
            near_pool: pool_of(config.clone())?,
            runtime,
            config,
            _stop: stop_tx,
        });
        let owned = url.to_string();
        db.block(|c| async move { migrate(&c).await })
            .map_err(|e| match e {
                DbError::Unavailable(why) => DbError::Unreachable { url: owned, why },
                e => e,
            })?;
        Ok(db)
    }

    /// A connection, on the connection thread's runtime.
    async fn conn(pool: deadpool_postgres::Pool) -> Result<Conn, DbError> {
        pool.get()
            .await
            .map_err(|e| DbError::Unavailable(e.to_string()))
    }

    /// Run `job` on the connection's runtime and wait for it from any
    /// thread (synchronous code, or a task of another runtime).
    pub fn block<T, F, Fut>(&self, job: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(Conn) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, DbError>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let pool = self.pool.clone();
        self.runtime.spawn(async move {
            let result = match Self::conn(pool).await {
                Ok(c) => job(c).await,
                Err(e) => Err(e),
            };
            let _ = tx.send(result);
        });
        let wait = move || rx.recv().map_err(|_| DbError::Gone);
        // On a worker of a multi-threaded runtime (a turn of `serve`), the
        // worker's other tasks move to another thread while this one waits
        // for its round trip: parked as it is, the server's two workers
        // would otherwise run at most two statements at a time, and answer
        // nothing else meanwhile.
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)?
            }
            _ => wait()?,
        }
    }

    /// Run `job` and await it from async code. It runs to its end even when
    /// the caller stops waiting (a release the client hung up on still
    /// stores the turn): as a task of the caller's runtime when that one is
    /// multi-threaded (`serve`'s: a turn's lease and release then cost no
    /// hand-over to the connection thread, and the connections they open
    /// are driven by that runtime), else of the connection thread's.
    pub async fn run<T, F, Fut>(&self, job: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(Conn) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, DbError>> + Send + 'static,
    {
        let (runtime, pool) = self.nearest();
        let task = runtime.spawn(async move { job(Self::conn(pool).await?).await });
        match task.await {
            Ok(result) => result,
            Err(_) => Err(DbError::Gone),
        }
    }

    /// A connection of the pool [`run`](Self::run) would use, for a task
    /// of a multi-threaded runtime that runs its statements itself (it was
    /// spawned to run to its end already): no task of its own per job.
    pub(crate) async fn conn_here(&self) -> Result<Conn, DbError> {
        Self::conn(self.nearest().1).await
    }

    /// The caller's runtime and the pool it drives when that runtime is
    /// multi-threaded, else the connection thread's. Never a current-thread
    /// runtime: a connection opened there would be driven by a thread that
    /// a synchronous `block` may park.
    fn nearest(&self) -> (tokio::runtime::Handle, deadpool_postgres::Pool) {
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                (h, self.near_pool.clone())
            }
            _ => (self.runtime.clone(), self.pool.clone()),
        }
    }

    /// Start `job` while a caller waits for something else (a turn's lease
    /// renewal): as [`run`](Self::run) places its work.
    pub fn spawn_nearby<F>(&self, job: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.nearest().0.spawn(job);
    }

    /// Listen on `channel` over a connection of its own, for as long as
    /// this `Db` lives (reconnecting a second after the connection is
    /// lost), calling `on` with each notification's payload and that
    /// connection, which it may use for a statement or two.
    pub(crate) fn listen<F, Fut>(&self, channel: &'static str, on: F)
    where
        F: Fn(String, Arc<Client>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let config = self.config.clone();
        self.runtime.spawn(async move {
            loop {
                if let Err(e) = listen_once(&config, channel, &on).await {
                    tracing::debug!("PostgreSQL: listening on {channel}: {e}; again in 1 s");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }

    /// Start `job` on the connection's runtime without waiting for it.
    pub fn spawn<F>(&self, job: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.runtime.spawn(job);
    }
}

/// A pool of at most [`POOL_SIZE`] connections to `config`'s server.
fn pool_of(config: tokio_postgres::Config) -> Result<deadpool_postgres::Pool, DbError> {
    let manager = deadpool_postgres::Manager::from_config(
        config,
        NoTls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    deadpool_postgres::Pool::builder(manager)
        .max_size(POOL_SIZE)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .create_timeout(Some(CONNECT_TIMEOUT))
        .wait_timeout(Some(CONNECT_TIMEOUT * 2))
        .recycle_timeout(Some(CONNECT_TIMEOUT))
        .build()
        .map_err(|e| DbError::Unavailable(e.to_string()))
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

/// How often a listening connection is probed ([`Db::listen`]).
const LISTEN_PROBE: Duration = Duration::from_secs(30);

/// One connection's life of [`Db::listen`]: `LISTEN`, then each
/// notification handed to `on` in turn, until the connection ends.
async fn listen_once<F, Fut>(
    config: &tokio_postgres::Config,
    channel: &str,
    on: &F,
) -> Result<(), tokio_postgres::Error>
where
    F: Fn(String, Arc<Client>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (client, mut connection) = config.connect(NoTls).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                    if tx.send(n.payload().to_string()).is_err() {
                        return Ok(());
                    }
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    });
    let client = Arc::new(client);
    client.batch_execute(&format!("LISTEN {channel}")).await?;
    // A connection that died without closing (a half-open TCP one) would
    // deliver nothing, unnoticed: one that does not answer a probe within
    // 10 s is given up, and the next connection listens again.
    let mut probe = tokio::time::interval(LISTEN_PROBE);
    probe.tick().await;
    loop {
        tokio::select! {
            payload = rx.recv() => match payload {
                Some(payload) => on(payload, client.clone()).await,
                None => break,
            },
            _ = probe.tick() => {
                match tokio::time::timeout(Duration::from_secs(10), client.simple_query("")).await {
                    Ok(answered) => { answered?; }
                    Err(_) => {
                        driver.abort();
                        return Ok(());
                    }
                }
            }
        }
    }
    match driver.await {
        Ok(ended) => ended,
        Err(_) => Ok(()),
    }
}

/// A lease or claim's time to live as PostgreSQL's interval text.
pub(crate) fn interval(d: Duration) -> String {
    format!("{} milliseconds", d.as_millis())
}
