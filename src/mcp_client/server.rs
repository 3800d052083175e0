//! One MCP server: its connection through rmcp (a stdio child or a
//! streamable-HTTP session), restarted when it died, and its state for
//! `plugins doctor`.
//!
//! Reconnecting follows Hermes's rule for a dead stdio child: a call that
//! finds the connection gone (the child exited, the transport closed)
//! starts a new one first and then makes the call; a call the connection
//! died under is not replayed (the server may have acted on it) — it fails,
//! and the next call restarts the server.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RunningService};
use rmcp::{RoleClient, ServiceExt};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::core::mcp::{McpAnswer, McpCallError};
use crate::plugins::config::{McpServerSpec, McpTransport};

type Service = RunningService<RoleClient, ()>;

/// A live connection: the rmcp service, and the child behind it (stdio).
struct Conn {
    service: Service,
    child: Option<tokio::process::Child>,
}

impl Conn {
    /// Whether calls can still reach the server.
    fn alive(&mut self) -> bool {
        if self.service.peer().is_transport_closed() {
            return false;
        }
        match &mut self.child {
            Some(child) => child.id().is_some_and(|pid| !exited(pid)),
            None => true,
        }
    }
}

/// Whether child `pid` has exited, asked of the kernel without reaping it
/// (tokio's reaper still collects its status). `Child::try_wait` is not
/// enough: it can say "running" for a child that died until tokio's
/// reactor has seen the exit, and a call sent then would be lost.
fn exited(pid: u32) -> bool {
    let pid: libc::id_t = pid;
    // SAFETY: `info` is a zeroed `siginfo_t` the kernel writes into;
    // WNOWAIT leaves the child waitable, WNOHANG makes the call return at
    // once. A pid that is not our child (already reaped) is an error: gone.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r != 0 || info.si_pid() != 0
    }
}

/// A server's state, as `plugins doctor` shows it.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ServerStatus {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// `config`, or the plugin key of the bundle that declared it.
    pub owner: String,
    /// `connected`, `disconnected` (restarted at the next call) or `failed`
    /// (never connected).
    pub state: &'static str,
    /// The tools it offers (as listed when it first connected).
    pub tools: usize,
    pub last_error: Option<String>,
    /// How many times a connection was made (1 without restarts).
    pub connects: u32,
}

/// One configured MCP server.
pub struct Server {
    pub spec: McpServerSpec,
    /// Where a stdio server's stderr goes (`<home>/logs/mcp-<name>.log`).
    stderr_log: PathBuf,
    /// plughost's home (a confined server's data directories are in it).
    home: PathBuf,
    conn: tokio::sync::Mutex<Option<Conn>>,
    status: Mutex<ServerStatus>,
}

impl Server {
    pub fn new(spec: McpServerSpec, home: &Path) -> Server {
        let status = ServerStatus {
            name: spec.name.clone(),
            transport: match spec.transport {
                McpTransport::Stdio { .. } => "stdio",
                McpTransport::Http { .. } => "http",
            },
            owner: spec.owner.clone(),
            state: "failed",
            ..Default::default()
        };
        Server {
            stderr_log: home.join("logs").join(format!("mcp-{}.log", spec.name)),
            home: home.to_path_buf(),
            spec,
            conn: tokio::sync::Mutex::new(None),
            status: Mutex::new(status),
        }
    }

    /// Its state now.
    pub fn status(&self) -> ServerStatus {
        let mut status = self.lock_status().clone();
        if let Ok(mut conn) = self.conn.try_lock() {
            let live = conn.as_mut().is_some_and(Conn::alive);
            if !live && status.state == "connected" {
                status.state = "disconnected";
            }
        }
        status
    }

    fn lock_status(&self) -> std::sync::MutexGuard<'_, ServerStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn note_error(&self, problem: &str) {
        let mut status = self.lock_status();
        status.last_error = Some(problem.to_string());
    }

    /// Connect (the first time) and list its tools.
    pub async fn start(&self) -> Result<Vec<rmcp::model::Tool>, String> {
        let mut conn = self.conn.lock().await;
        let peer = self.connect_into(&mut conn).await?;
        let tools = tokio::time::timeout(self.spec.connect_timeout, peer.list_all_tools())
            .await
            .map_err(|_| {
                format!(
                    "tools/list got no answer within {} s",
                    self.spec.connect_timeout.as_secs_f64()
                )
            })
            .and_then(|r| r.map_err(|e| format!("tools/list failed: {e}")));
        match tools {
            Ok(tools) => {
                self.lock_status().tools = tools.len();
                Ok(tools)
            }
            Err(problem) => {
                self.note_error(&problem);
                Err(problem)
            }
        }
    }

    /// A peer of a live connection, starting a new connection when there
    /// is none or it died.
    async fn live_peer(&self) -> Result<Peer<RoleClient>, McpCallError> {
        let mut conn = self.conn.lock().await;
        if let Some(live) = conn.as_mut() {
            if live.alive() {
                return Ok(live.service.peer().clone());
            }
        }
        if conn.is_some() {
            tracing::info!(
                "MCP server '{}' is gone (its process exited or its connection closed); starting it again",
                self.spec.name
            );
        }
        self.connect_into(&mut conn)
            .await
            .map_err(|problem| McpCallError::NotConnected {
                server: self.spec.name.clone(),
                problem,
            })
    }

    /// Replace `slot` with a new connection (the old one, if any, is
    /// dropped: its child is killed).
    async fn connect_into(&self, slot: &mut Option<Conn>) -> Result<Peer<RoleClient>, String> {
        *slot = None;
        let limit = self.spec.connect_timeout;
        let made = match tokio::time::timeout(limit, self.connect()).await {
            Ok(made) => made,
            Err(_) => Err(format!(
                "no MCP handshake within {} s (connect_timeout)",
                limit.as_secs_f64()
            )),
        };
        let mut status = self.lock_status();
        match made {
            Ok(conn) => {
                let peer = conn.service.peer().clone();
                *slot = Some(conn);
                status.state = "connected";
                status.connects += 1;
                Ok(peer)
            }
            Err(problem) => {
                if status.connects > 0 {
                    status.state = "disconnected";
                }
                status.last_error = Some(problem.clone());
                Err(problem)
            }
        }
    }

    async fn connect(&self) -> Result<Conn, String> {
        match &self.spec.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args)
                    .envs(env)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(self.stderr_sink())
                    .kill_on_drop(true);
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                // --- issue 50: an isolated bundle's server, confined as its worker ---
                let confined = match &self.spec.sandboxed {
                    Some(plugin) => {
                        super::confined::prepare(&mut cmd, plugin, &self.home, (command, env))?
                    }
                    None => None,
                };
                let spawned = cmd.spawn();
                // (the child's ends of the confinement, closed here now)
                drop(cmd);
                let mut child = match spawned {
                    Ok(child) => child,
                    Err(e) => {
                        if let Some(c) = confined {
                            c.abandoned();
                        }
                        return Err(format!("cannot start '{command}': {e}"));
                    }
                };
                if let (Some(c), Some(pid)) = (confined, child.id()) {
                    if let Err(problem) = c.started(pid) {
                        let _ = child.start_kill();
                        return Err(problem);
                    }
                }
                let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                    return Err("the child's stdin/stdout were not piped".into());
                };
                let service = ().serve((stdout, stdin)).await.map_err(|e| {
                    format!("'{command}' started but the MCP handshake failed: {e}")
                })?;
                Ok(Conn {
                    service,
                    child: Some(child),
                })
            }
            McpTransport::Http { url, headers } => {
                let config = super::transport::http_config(url, headers)?;
                let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
                let service = ()
                    .serve(transport)
                    .await
                    .map_err(|e| format!("MCP handshake with {url} failed: {e}"))?;
                Ok(Conn {
                    service,
                    child: None,
                })
            }
        }
    }

    /// The stderr of a stdio child: appended to its log file, else dropped.
    fn stderr_sink(&self) -> std::process::Stdio {
        let file = self
            .stderr_log
            .parent()
            .map(std::fs::create_dir_all)
            .transpose()
            .ok()
            .and_then(|_| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.stderr_log)
                    .ok()
            });
        match file {
            Some(f) => f.into(),
            None => std::process::Stdio::null(),
        }
    }

    /// Call `tool` with `arguments`, restarting the server first when it
    /// died; at most `timeout` for the call itself.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
    ) -> Result<McpAnswer, McpCallError> {
        let peer = self.live_peer().await?;
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        match tokio::time::timeout(timeout, peer.call_tool(params)).await {
            Err(_) => {
                let error = McpCallError::TimedOut {
                    server: self.spec.name.clone(),
                    after: timeout,
                };
                self.note_error(&error.to_string());
                Err(error)
            }
            Ok(Ok(result)) => Ok(super::tools::answer_of(result)),
            Ok(Err(e)) => {
                let gone = peer.is_transport_closed();
                let mut problem = e.to_string();
                if gone {
                    problem.push_str(
                        " (the connection closed during the call, which was not repeated; the next call starts the server again)",
                    );
                }
                self.note_error(&problem);
                Err(McpCallError::Failed {
                    server: self.spec.name.clone(),
                    problem,
                })
            }
        }
    }
}
