//! `plughost mcp` and `plughost serve`: the plugins served to MCP clients
//! and OpenAI-compatible ones (see [`crate::serve`]).

use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::agent::{seconds, AgentSettings};
use super::exit::{Exit, Failure};
use super::Cli;
use crate::runtime::Runtime;
use crate::serve::http::{self, ServeOptions};
use crate::serve::mcp::PluginServer;
use crate::serve::metrics::Metrics;
use crate::serve::openai_api::ChatState;

/// Whether `serve` and `mcp` isolate third-party plugins by default: both
/// the binary and the wheel's console script do (the wheel's workers are
/// its interpreter's `sys.executable`, see `WorkerCommand::current_exe`).
pub(super) const ISOLATE_THIRD_PARTY: bool = true;

/// `plughost mcp` options.
#[derive(Args, Debug, Clone)]
pub struct McpArgs {
    /// Seconds a tool call may take.
    #[arg(long, value_name = "SECS", default_value = "120", allow_negative_numbers = true, value_parser = seconds)]
    pub tool_timeout: Duration,
}

/// `plughost serve` options.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on; anything but loopback needs an API key.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port; the address is printed).
    #[arg(long, default_value = "8765")]
    pub port: u16,
    /// Key clients must send as Authorization: Bearer KEY (else PLUGHOST_API_KEY).
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// The agent behind /v1/chat/completions (its model, limits, workspace).
    #[command(flatten)]
    pub agent: AgentSettings,
    /// The largest request body accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value = "4194304", value_parser = clap::value_parser!(u64).range(1024..=1_073_741_824))]
    pub max_body_bytes: u64,
    /// Seconds running turns may go on after SIGTERM or Ctrl-C before they are cancelled.
    #[arg(long, value_name = "SECS", default_value = "10", allow_negative_numbers = true, value_parser = seconds)]
    pub shutdown_grace: Duration,
    /// Seconds a named session (X-Plughost-Session) may go unused before it
    /// is finalized and unloaded (its transcript stays); 0: never.
    #[arg(long, value_name = "SECS", default_value = "1800", allow_negative_numbers = true, value_parser = session_idle)]
    pub session_idle: SessionIdle,
    /// Seconds between two runs of every plugin scheduled task (Felix's
    /// `cron_tasks` run once a minute by default).
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    pub cron_every: Option<Duration>,
    /// How callers authenticate: api_key (Bearer keys, the default) or a
    /// mode a plugin registered (Felix's register_authenticator).
    #[arg(long, value_name = "MODE", default_value = "api_key")]
    pub auth: String,
    /// Connections served at once (more wait to be accepted).
    #[arg(long, value_name = "N", default_value = "512", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,
    /// Seconds a client may take to send a request's headers.
    #[arg(long, value_name = "SECS", default_value = "10", allow_negative_numbers = true, value_parser = seconds)]
    pub header_timeout: Duration,
    /// Seconds a request body may go without sending data.
    #[arg(long, value_name = "SECS", default_value = "30", allow_negative_numbers = true, value_parser = seconds)]
    pub body_timeout: Duration,
    /// MCP HTTP sessions open at once (more are refused with 503).
    #[arg(long, value_name = "N", default_value = "1000", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_mcp_sessions: u32,
    /// Seconds an MCP HTTP session may go unused before it is closed.
    #[arg(long, value_name = "SECS", default_value = "300", allow_negative_numbers = true, value_parser = seconds)]
    pub mcp_session_idle: Duration,
    /// Reload the plugins when files under their directories or
    /// config.json change (debounced); without it, POST /admin/reload.
    #[arg(long)]
    pub watch: bool,
    /// Sessions in PostgreSQL, shared by replicas.
    #[command(flatten)]
    pub cluster: super::sessions::ClusterArgs,
}

/// `--session-idle`: how long a named session may go unused; `None` never.
#[derive(Clone, Copy, Debug)]
pub struct SessionIdle(pub Option<Duration>);

fn session_idle(value: &str) -> Result<SessionIdle, String> {
    if value.trim().parse::<f64>() == Ok(0.0) {
        return Ok(SessionIdle(None));
    }
    seconds(value)
        .map(|d| SessionIdle(Some(d)))
        .map_err(|e| format!("{e} (or 0: never evict)"))
}

/// The API key from `--api-key`, else `PLUGHOST_API_KEY`; empty is an error.
fn api_key(args: &ServeArgs) -> Result<Option<String>, Failure> {
    let (key, from) = match &args.api_key {
        Some(k) => (Some(k.clone()), "--api-key"),
        None => (std::env::var("PLUGHOST_API_KEY").ok(), "PLUGHOST_API_KEY"),
    };
    match key {
        Some(k) if k.trim().is_empty() => Err(Failure::usage(format!(
            "{from} is empty: give a key, or leave it out to serve on loopback without one"
        ))),
        Some(k) => Ok(Some(k.trim().to_string())),
        None => Ok(None),
    }
}

/// Move the MCP stream to descriptors of its own, out of every plugin's
/// reach: the real standard input and output are duplicated (close-on-exec,
/// so no worker or plugin child inherits them), then fd 0 is pointed at
/// `/dev/null` and fd 1 at standard error. A plugin's `print` (or anything
/// writing to fd 1) cannot corrupt the messages, and a plugin reading
/// stdin cannot steal the client's requests.
#[cfg(unix)]
fn take_stdio() -> Result<(std::fs::File, std::fs::File), Failure> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let failed = |what: &str| {
        Failure::failed(format!(
            "cannot {what}: {}",
            std::io::Error::last_os_error()
        ))
    };
    let null = std::fs::File::open("/dev/null")
        .map_err(|e| Failure::failed(format!("cannot open /dev/null: {e}")))?;
    // SAFETY: fcntl and dup2 on the process's standard descriptors, before
    // any thread of ours reads or writes them; every return value is checked.
    let (input, output) = unsafe {
        let input = libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3);
        if input < 0 {
            return Err(failed("duplicate standard input"));
        }
        let output = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if output < 0 {
            return Err(failed("duplicate standard output"));
        }
        if libc::dup2(null.as_raw_fd(), 0) < 0 {
            return Err(failed("point standard input at /dev/null"));
        }
        if libc::dup2(2, 1) < 0 {
            return Err(failed("point standard output at standard error"));
        }
        (input, output)
    };
    // SAFETY: `input` and `output` are fresh descriptors from fcntl above,
    // owned by no one else; each File takes sole ownership and closes it.
    Ok(unsafe {
        (
            std::fs::File::from_raw_fd(input),
            std::fs::File::from_raw_fd(output),
        )
    })
}

/// `plughost mcp`.
pub(super) fn mcp(
    rt: &tokio::runtime::Runtime,
    cli: &Cli,
    runtime: &Runtime,
    args: &McpArgs,
) -> Result<Exit, Failure> {
    #[cfg(unix)]
    let (input, output) = take_stdio()?;
    // A plugin's forked child must not hold the client's stream open.
    #[cfg(unix)]
    let _forks = {
        use std::os::fd::AsRawFd;
        [input.as_raw_fd(), output.as_raw_fd()]
            .map(crate::isolation::inherit::close_in_forked_children)
    };
    // A long-running host: third-party plugins run isolated by default.
    let host = Arc::new(
        super::host_builder(cli, runtime)
            .isolate_third_party(ISOLATE_THIRD_PARTY)
            .build()?,
    );
    let server = PluginServer::new(host, args.tool_timeout);
    rt.block_on(async move {
        #[cfg(unix)]
        let (input, output) = (
            tokio::fs::File::from_std(input),
            tokio::fs::File::from_std(output),
        );
        #[cfg(not(unix))]
        let (input, output) = (tokio::io::stdin(), tokio::io::stdout());
        crate::serve::mcp::serve_stdio(server, input, output).await
    })
    .map_err(Failure::failed)?;
    Ok(Exit::Success)
}

/// What a long-running server needs of its process: a write to a closed
/// pipe (stderr's reader gone) fails with EPIPE instead of ending it, and
/// the soft limit of open descriptors is the hard one.
fn prepare_process() {
    http::ignore_sigpipe();
    if let Some((before, after)) = crate::serve::limits::raise_descriptor_limit() {
        if before != after {
            tracing::debug!("open descriptor limit raised from {before} to {after}");
        }
    }
}

/// `plughost serve`.
pub(super) fn serve(
    rt: &tokio::runtime::Runtime,
    cli: &Cli,
    runtime: &Runtime,
    args: &ServeArgs,
) -> Result<Exit, Failure> {
    let key = api_key(args)?;
    prepare_process();
    let bind = rt
        .block_on(http::resolve_bind(&args.host, args.port, key.as_deref()))
        .map_err(Failure::usage)?;
    let agent = super::agent::build_agent_with(
        cli.home.as_ref(),
        (cli.isolate.as_ref(), ISOLATE_THIRD_PARTY),
        runtime,
        &args.agent,
        crate::serve::openai_api::IterationMarks::wrap,
    )?;
    // --- changed by rl7: routes, auth mode and cron re-mounted on reload ---
    // One replica of a cluster (sessions in PostgreSQL).
    let replicas = super::sessions::join(rt, &agent, &args.cluster)?;
    let cluster = replicas.shared.as_ref().map(|(c, _)| c.clone());
    let scheduler = tokio_util::sync::CancellationToken::new();
    let _stop_scheduler = scheduler.clone().drop_guard();
    let parts = rt
        .block_on(crate::serve::plugin_routes::live::ServerParts::start(
            agent.host().clone(),
            &args.auth,
            (cluster, args.cron_every),
            scheduler,
        ))
        .map_err(Failure::usage)?;
    // A plugin's body_limit_bytes raises the cap of the plugin routes only
    // (`http::plugin_route` takes the larger of the two per request, so a
    // reload's new limits apply); plughost's own endpoints keep
    // --max-body-bytes.
    let max_body = args.max_body_bytes;
    let options = ServeOptions {
        api_key: key,
        max_body: max_body as usize,
        shutdown_grace: args.shutdown_grace,
        parts: Some(parts.clone()),
        max_connections: args.max_connections as usize,
        header_timeout: args.header_timeout,
        body_timeout: args.body_timeout,
        max_mcp_sessions: args.max_mcp_sessions as usize,
        mcp_session_idle: args.mcp_session_idle,
    };
    let metrics = Arc::new(Metrics::default());
    let mcp = PluginServer::new(agent.host().clone(), args.agent.tool_timeout)
        .with_metrics(metrics.clone())
        .hiding_owner(crate::agent::tools::BUILTIN_OWNER)
        .with_cluster(replicas.shared.as_ref().map(|(c, _)| c.clone()));
    let chat = Arc::new(
        ChatState::new(
            agent,
            metrics,
            format!("plughost:{}", args.agent.model),
            tokio_util::sync::CancellationToken::new(),
        )
        .with_session_idle(args.session_idle.0),
    );
    let _ = chat.replicas.set(replicas);
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|e| Failure::failed(format!("cannot listen on {bind}: {e}")))?;
        // A plugin's forked child must not keep the port (the guard is
        // dropped with the listener, before its number can be reused).
        let forks = {
            use std::os::fd::AsRawFd;
            crate::isolation::inherit::close_in_forked_children(listener.as_raw_fd())
        };
        let local = listener
            .local_addr()
            .map_err(|e| Failure::failed(format!("cannot read the listening address: {e}")))?;
        let mcp_cancel = tokio_util::sync::CancellationToken::new();
        let app = http::router(
            chat.clone(),
            mcp,
            &options,
            mcp_cancel.clone(),
            local.ip().is_loopback(),
        );
        // Before the address is announced: a client may signal right after.
        let signal = http::shutdown_signal();
        crate::serve::say(format_args!(
            "plughost serve: listening on http://{local} (MCP at /mcp, OpenAI API at /v1; model {})",
            args.agent.model
        ));
        // The file `plugins … --reload` finds the server by; --watch.
        let home = chat.agent.host().home().to_path_buf();
        let _announced = crate::serve::watch::announce(&home, local)
            .map_err(|e| tracing::warn!("cannot write {}: {e} (plugins … --reload will not find this server)", crate::serve::watch::server_file(&home).display()))
            .ok();
        let _watching = match args.watch {
            false => None,
            true => Some(crate::serve::watch::start(chat.agent.host().clone()).map_err(|e| {
                Failure::failed(format!("--watch cannot watch the plugin directories: {e}"))
            })?),
        };
        http::serve_until(
            (listener, forks),
            app,
            chat,
            mcp_cancel,
            (options.shutdown_grace, &options),
            signal,
        )
        .await
        .map_err(|e| Failure::failed(format!("the server failed: {e}")))?;
        parts.shutdown().await;
        crate::serve::say(format_args!("plughost serve: stopped"));
        Ok::<_, Failure>(())
    })?;
    Ok(Exit::Success)
}
