//! What a server takes from the plugin set — its plugins' HTTP routes, the
//! auth mode `--auth` names, their cron tasks — kept in step with reloads.
//!
//! Why behind an [`ArcSwap`]: a request loads the [`Mounted`] in force
//! when it arrives and holds it until its answer's body ends, so a reload
//! swaps a fresh mount in without touching requests in flight; the old
//! mount's applications get their lifespan shutdown when its last request
//! ends ([`PluginRoutes`]'s `Drop`). A reload that changed no plugin with
//! routes keeps the mounted applications as they are (their lifespans do
//! not restart).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::PluginRoutes;
use crate::core::http_app::AuthMode;
use crate::host::Host;
use crate::serve::cron::{CronChanges, CronMount};

/// How callers authenticate under one mount.
#[derive(Clone)]
pub enum Auth {
    /// plughost's Bearer key (or none on loopback): `--auth api_key`.
    ApiKey,
    /// A plugin's mode (`--auth MODE`).
    Plugin(AuthMode),
    /// `--auth MODE` named a mode no loaded plugin registers any more (its
    /// plugin was removed, or its new version dropped it): every request
    /// but `/healthz` is refused (fail closed) until a reload brings it back.
    Gone { mode: String },
}

/// One mount: what requests are served with until the next reload.
pub struct Mounted {
    /// The plugin set generation it was taken from.
    pub generation: u64,
    pub routes: Option<Arc<PluginRoutes>>,
    pub auth: Auth,
}

/// What the last re-mount did (`POST /admin/reload` answers it as `server`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Remounted {
    pub generation: u64,
    /// Whether the plugin routes were mounted again on fresh applications.
    pub routes_remounted: bool,
    pub cron: CronChanges,
    /// Problems: a mode gone, routes that failed to mount or start.
    pub warnings: Vec<String>,
}

/// The server's live parts (see the module docs).
pub struct ServerParts {
    host: Arc<Host>,
    /// `--auth MODE`; `None` for `api_key`.
    mode: Option<String>,
    current: ArcSwap<Mounted>,
    cron: CronMount,
    done: tokio::sync::watch::Sender<Remounted>,
    /// One re-mount at a time.
    remounting: tokio::sync::Mutex<()>,
}

impl ServerParts {
    /// Mount the set in force: its routes (lifespans started), the auth
    /// mode `mode` names (`api_key` is plughost's), its cron tasks on
    /// their timers (`every` replaces their periods; once per cluster with
    /// one). `Err` when `mode` names no mode of a loaded plugin.
    pub async fn start(
        host: Arc<Host>,
        mode: &str,
        (cluster, every): (Option<Arc<crate::cluster::Cluster>>, Option<Duration>),
        stop: CancellationToken,
    ) -> Result<Arc<ServerParts>, String> {
        let mode = (mode != "api_key").then(|| mode.to_string());
        if let Some(m) = &mode {
            if let Auth::Gone { .. } = auth_of(&host, m) {
                return Err(unknown_mode(&host, m));
            }
        }
        let parts = Arc::new(ServerParts {
            mode,
            current: ArcSwap::from_pointee(Mounted {
                generation: host.plugin_set().generation,
                routes: None,
                auth: Auth::ApiKey,
            }),
            cron: CronMount::new(cluster, every, stop.clone()),
            done: tokio::sync::watch::channel(Remounted::default()).0,
            remounting: tokio::sync::Mutex::new(()),
            host,
        });
        parts.remount(true).await;
        tokio::spawn(follow(parts.clone(), stop));
        Ok(parts)
    }

    /// The mount in force now (a request holds it while it runs).
    pub fn load(&self) -> Arc<Mounted> {
        self.current.load_full()
    }

    /// Wait until the mount of generation `generation` (or a later one) is
    /// in force, at most `limit`; what the last re-mount did.
    pub async fn mounted(&self, generation: u64, limit: Duration) -> Remounted {
        let mut rx = self.done.subscribe();
        let reached = rx.wait_for(|r| r.generation >= generation);
        let _ = tokio::time::timeout(limit, reached).await;
        let last = rx.borrow().clone();
        last
    }

    /// Mount the set in force if it is newer than the mount (or `first`).
    async fn remount(&self, first: bool) {
        let _one = self.remounting.lock().await;
        let set = self.host.plugin_set();
        let old = self.current.load_full();
        if !first && set.generation <= old.generation {
            return;
        }
        let mut warnings = Vec::new();
        let keep = old
            .routes
            .as_ref()
            .filter(|r| !first && r.mounted_from(set.registry()))
            .cloned();
        let routes_remounted = keep.is_none();
        let routes = match keep {
            Some(r) => Some(r),
            None => {
                let mounted = PluginRoutes::mount(set.registry(), &mut warnings);
                match mounted {
                    Some(r) => Some(Arc::new(r.startup(&mut warnings).await)),
                    None => None,
                }
            }
        };
        let auth = match &self.mode {
            None => Auth::ApiKey,
            Some(m) => auth_of(&self.host, m),
        };
        if let Auth::Gone { mode } = &auth {
            let line = format!(
                "auth mode '{mode}' (serve --auth {mode}) is no longer registered by a loaded plugin: every request but /healthz is refused until a reload brings it back or the server restarts with another --auth"
            );
            tracing::warn!("{line}");
            warnings.push(line);
        }
        let cron = self.cron.remount(&self.host);
        drop(set);
        let generation = self.host.plugin_set().generation.max(old.generation);
        self.current.store(Arc::new(Mounted {
            generation,
            routes,
            auth,
        }));
        // The old mount goes when its last request ends.
        drop(old);
        self.done.send_replace(Remounted {
            generation,
            routes_remounted,
            cron,
            warnings,
        });
    }

    /// Lifespan shutdown of the mounted applications (the server stopping).
    pub async fn shutdown(&self) {
        if let Some(routes) = &self.current.load().routes {
            routes.shutdown().await;
        }
    }
}

/// Re-mount after each reload of `parts`' host until `stop`.
async fn follow(parts: Arc<ServerParts>, stop: CancellationToken) {
    let mut reloads = parts.host.reloads();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = reloads.changed() => if changed.is_err() { return },
        }
        parts.remount(false).await;
    }
}

/// The auth mode `mode` of the host's set in force.
fn auth_of(host: &Host, mode: &str) -> Auth {
    match host.registry().auth_modes().iter().find(|m| m.mode == mode) {
        Some(m) => Auth::Plugin(m.clone()),
        None => Auth::Gone {
            mode: mode.to_string(),
        },
    }
}

/// `--auth MODE` names no mode: which there are.
fn unknown_mode(host: &Host, mode: &str) -> String {
    let mut known = vec!["api_key".to_string()];
    known.extend(
        host.registry()
            .auth_modes()
            .iter()
            .map(|m| format!("{} (plugin {})", m.mode, m.plugin)),
    );
    format!(
        "--auth {mode}: no such auth mode; the modes are {} (a plugin's mode exists once the plugin that registers it loads)",
        known.join(", ")
    )
}

impl std::fmt::Debug for ServerParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.load();
        f.debug_struct("ServerParts")
            .field("mode", &self.mode)
            .field("generation", &m.generation)
            .field("routes", &m.routes)
            .finish()
    }
}
