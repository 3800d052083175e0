//! The dialects' built-in tools (Flowly's `web_search` / `web_extract`),
//! offered by the agent while a web backend plugin's provider is available.
//! The tools and the Python provider registry are the dialect's
//! ([`crate::dialects::abilities::BuiltinTools`]); `plugins doctor`'s view of
//! them is the dialect's doctor section.
//!
//! Their availability check asks the Python provider registry, which reads
//! `config.json`. The agent asks it for every tool it offers on every model
//! iteration, so the answer is cached here ([`CachedCheck`]): asked again
//! only when `config.json` changed, or after [`RECHECK`] (what the file does
//! not show: an API key a plugin set in the environment). The file is
//! watched ([`ConfigWatch`]: one inotify watch of its directory per path
//! in the process), so a cached answer costs an atomic load: no `stat`, no
//! Python. Where no watch can be set up (no inotify instance left, a home
//! that does not exist yet) each check `stat`s the file instead, as before.
//! A call still runs the tool, which says why when no provider can serve it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use crate::core::hooks::ToolCallContext;
use crate::core::outcome::{PluginError, Unavailability};
use crate::core::registry::{Tool, ToolHandler, ToolReturn};

/// How long a cached answer stands while `config.json` is unchanged.
pub const RECHECK: Duration = Duration::from_secs(1);

/// Every dialect's built-in tools (owner `builtin`) for the host whose home
/// is `home` (its `config.json` holds the providers' settings), their
/// checks cached.
pub fn web_tools(home: &Path) -> Vec<Tool> {
    let config = home.join("config.json");
    // One watch for the tools of this home, made at the first check (an
    // agent that never runs a model iteration sets up nothing).
    let watch = Arc::new(OnceLock::new());
    crate::dialects::builtin_tools(home, super::BUILTIN_OWNER)
        .into_iter()
        .map(|mut tool| {
            tool.handler = Arc::new(CachedCheck {
                inner: tool.handler.clone(),
                config: config.clone(),
                watch: watch.clone(),
                last: Mutex::new(None),
            });
            tool
        })
        .collect()
}

/// Changes of one `config.json`, counted by a watch of its directory.
struct ConfigWatch {
    /// Bumped on every event that touches the file (written, replaced,
    /// removed) or may have (the watch overflowed).
    generation: Arc<AtomicU64>,
    _watcher: notify::RecommendedWatcher,
}

impl ConfigWatch {
    /// The process's watch of `config` (shared by every agent of that
    /// home), or `None` when none can be set up.
    fn of(config: &Path) -> Option<Arc<ConfigWatch>> {
        static WATCHES: OnceLock<Mutex<HashMap<PathBuf, Weak<ConfigWatch>>>> = OnceLock::new();
        let mut all = WATCHES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(watch) = all.get(config).and_then(Weak::upgrade) {
            return Some(watch);
        }
        all.retain(|_, w| w.strong_count() > 0);
        let watch = Arc::new(ConfigWatch::start(config)?);
        all.insert(config.to_path_buf(), Arc::downgrade(&watch));
        Some(watch)
    }

    fn start(config: &Path) -> Option<ConfigWatch> {
        use notify::{RecursiveMode, Watcher};
        let dir = config.parent()?;
        let name = config.file_name()?.to_os_string();
        let generation = Arc::new(AtomicU64::new(0));
        let seen = generation.clone();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let touched = match &event {
                    // Reading it (the check itself does) is no change.
                    Ok(e) if matches!(e.kind, notify::EventKind::Access(_)) => false,
                    Ok(e) => {
                        e.need_rescan() || e.paths.iter().any(|p| p.file_name() == Some(&name))
                    }
                    // An error of the watch: the file may have changed unseen.
                    Err(_) => true,
                };
                if touched {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            })
            .ok()?;
        watcher.watch(dir, RecursiveMode::NonRecursive).ok()?;
        Some(ConfigWatch {
            generation,
            _watcher: watcher,
        })
    }
}

/// What identifies a version of `config.json`: the watch's count of its
/// changes, or (unwatched) its size, modification time and inode.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Version {
    Watched(u64),
    Stat(Stamp),
}

/// What identifies a version of `config.json` without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp(Option<(u64, SystemTime, u64)>);

impl Stamp {
    fn of(path: &Path) -> Stamp {
        Stamp(std::fs::metadata(path).ok().map(|m| {
            #[cfg(unix)]
            let ino = std::os::unix::fs::MetadataExt::ino(&m);
            #[cfg(not(unix))]
            let ino = 0;
            (m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH), ino)
        }))
    }
}

/// A tool whose availability check is remembered per [`Version`] of
/// `config.json`, for at most [`RECHECK`].
struct CachedCheck {
    inner: Arc<dyn ToolHandler>,
    config: PathBuf,
    /// The watch of `config`, once the first check set it up (`None` in
    /// it: none could be).
    watch: Arc<OnceLock<Option<Arc<ConfigWatch>>>>,
    last: Mutex<Option<(Version, Instant, bool)>>,
}

impl CachedCheck {
    fn version(&self) -> Version {
        match self.watch.get_or_init(|| ConfigWatch::of(&self.config)) {
            Some(watch) => Version::Watched(watch.generation.load(Ordering::SeqCst)),
            None => Version::Stat(Stamp::of(&self.config)),
        }
    }
}

impl ToolHandler for CachedCheck {
    fn check(&self) -> Option<Result<bool, PluginError>> {
        // Read before the check runs: a change during it makes the next
        // check ask again.
        let version = self.version();
        if let Some((seen, at, answer)) = &*self.last.lock().expect("check cache") {
            if *seen == version && at.elapsed() < RECHECK {
                return Some(Ok(*answer));
            }
        }
        let answer = self.inner.check()?;
        // A failing check is not cached: it is asked again next time.
        if let Ok(ok) = &answer {
            *self.last.lock().expect("check cache") = Some((version, Instant::now(), *ok));
        }
        Some(answer)
    }

    fn unavailability(&self) -> Unavailability {
        self.inner.unavailability()
    }

    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        self.inner.call(ctx)
    }

    fn reads_rust_params(&self) -> bool {
        self.inner.reads_rust_params()
    }

    fn fatal(&self, error: &PluginError) -> bool {
        self.inner.fatal(error)
    }
}
