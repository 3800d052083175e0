//! The dialects' built-in tools (Flowly's `web_search` / `web_extract`),
//! offered by the agent while a web backend plugin's provider is available.
//! The tools and the Python provider registry are the dialect's
//! ([`crate::dialects::Dialect::builtin_tools`]); `plugins doctor`'s view of
//! them is the dialect's doctor section.
//!
//! Their availability check asks the Python provider registry, which reads
//! `config.json`. The agent asks it for every tool it offers on every model
//! iteration, so the answer is cached here ([`CachedCheck`]): asked again
//! only when `config.json` changed (its size, modification time or inode,
//! one `stat`), or after [`RECHECK`] (what the file does not show: an API
//! key a plugin set in the environment). A call still runs the tool, which
//! says why when no provider can serve it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
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
    crate::dialects::builtin_tools(home, super::BUILTIN_OWNER)
        .into_iter()
        .map(|mut tool| {
            tool.handler = Arc::new(CachedCheck {
                inner: tool.handler.clone(),
                config: config.clone(),
                last: Mutex::new(None),
            });
            tool
        })
        .collect()
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

/// A tool whose availability check is remembered per [`Stamp`] of
/// `config.json`, for at most [`RECHECK`].
struct CachedCheck {
    inner: Arc<dyn ToolHandler>,
    config: PathBuf,
    last: Mutex<Option<(Stamp, Instant, bool)>>,
}

impl ToolHandler for CachedCheck {
    fn check(&self) -> Option<Result<bool, PluginError>> {
        let stamp = Stamp::of(&self.config);
        if let Some((seen, at, answer)) = &*self.last.lock().expect("check cache") {
            if *seen == stamp && at.elapsed() < RECHECK {
                return Some(Ok(*answer));
            }
        }
        let answer = self.inner.check()?;
        // A failing check is not cached: it is asked again next time.
        if let Ok(ok) = &answer {
            *self.last.lock().expect("check cache") = Some((stamp, Instant::now(), *ok));
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
