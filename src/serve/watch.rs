//! Reloading a running server: `serve --watch` (file changes under the
//! plugin directories and `config.json`, debounced, then a reload), and
//! the file a server writes in its home so that `plughost plugins
//! install/enable --reload` can find it and `POST /admin/reload`.
//!
//! The file (`<home>/serve.json`: the URL and the server's pid) holds no
//! key: a client of a server started with a key sends `PLUGHOST_API_KEY`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::host::{Host, ReloadReport};

/// How long the files must stay quiet after a change before the reload
/// runs (an editor's save, `git checkout` and `pip install` write many).
pub const DEBOUNCE: Duration = Duration::from_millis(250);

/// What a running server writes in its home.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServerFile {
    /// `http://127.0.0.1:8765`.
    pub url: String,
    pub pid: u32,
}

/// Where a home's server file is.
pub fn server_file(home: &Path) -> PathBuf {
    home.join("serve.json")
}

/// The server file of `home`, removed when the server stops (only if it
/// is still this server's).
pub struct Announced {
    path: PathBuf,
}

/// Write `home`'s server file for a server listening on `addr`.
pub fn announce(home: &Path, addr: std::net::SocketAddr) -> std::io::Result<Announced> {
    let host = if addr.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        match addr.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            std::net::IpAddr::V4(ip) => ip.to_string(),
        }
    };
    let file = ServerFile {
        url: format!("http://{host}:{}", addr.port()),
        pid: std::process::id(),
    };
    let path = server_file(home);
    std::fs::create_dir_all(home)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&file).expect("serializable"))?;
    std::fs::rename(&tmp, &path)?;
    Ok(Announced { path })
}

impl Drop for Announced {
    fn drop(&mut self) {
        let ours = read_server_file(&self.path).is_some_and(|f| f.pid == std::process::id());
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn read_server_file(path: &Path) -> Option<ServerFile> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The server running on `home`, if its file is there.
pub fn running_server(home: &Path) -> Option<ServerFile> {
    read_server_file(&server_file(home))
}

/// Why asking a running server to reload failed.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("no plughost serve runs on this home (no {0})")]
    NoServer(PathBuf),
    #[error("the server at {url} could not be reached: {message}")]
    Unreachable { url: String, message: String },
    #[error("the server at {url} answered {status}: {body}")]
    Refused {
        url: String,
        status: u16,
        body: String,
    },
}

/// `POST /admin/reload` to the server running on `home` (with
/// `PLUGHOST_API_KEY` as its key when set); what it reloaded.
pub async fn ask_reload(home: &Path) -> Result<ReloadReport, AskError> {
    let server = running_server(home).ok_or_else(|| AskError::NoServer(server_file(home)))?;
    let url = format!("{}/admin/reload", server.url);
    let unreachable = |e: reqwest::Error| AskError::Unreachable {
        url: server.url.clone(),
        message: e.to_string(),
    };
    let mut request = reqwest::Client::new()
        .post(&url)
        .timeout(Duration::from_secs(300));
    if let Ok(key) = std::env::var("PLUGHOST_API_KEY") {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.map_err(unreachable)?;
    let status = response.status();
    let body = response.text().await.map_err(unreachable)?;
    if !status.is_success() {
        return Err(AskError::Refused {
            url: server.url,
            status: status.as_u16(),
            body,
        });
    }
    serde_json::from_str(&body).map_err(|e| AskError::Refused {
        url: server.url,
        status: status.as_u16(),
        body: format!("{body} (not a reload report: {e})"),
    })
}

/// `POST /admin/cron/{name}` to the server running on `home`: its answer
/// (`outcome` and the rest); `None` when no server runs there or it
/// cannot be reached (a stale file), so the caller runs the task itself.
pub async fn ask_cron(home: &Path, name: &str) -> Option<serde_json::Value> {
    let server = running_server(home)?;
    let mut request = reqwest::Client::new()
        .post(format!("{}/admin/cron/{name}", server.url))
        .timeout(Duration::from_secs(3600));
    if let Ok(key) = std::env::var("PLUGHOST_API_KEY") {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.ok()?;
    if response.status().is_server_error() {
        return None;
    }
    response.json().await.ok()
}

/// What the server running on `home` has loaded (`GET /admin/plugins`):
/// its generation and each plugin's version and load time; `None` when no
/// server runs there or it does not answer within a few seconds.
pub async fn ask_versions(home: &Path) -> Option<RunningVersions> {
    let server = running_server(home)?;
    let mut request = reqwest::Client::new()
        .get(format!("{}/admin/plugins", server.url))
        .timeout(Duration::from_secs(3));
    if let Ok(key) = std::env::var("PLUGHOST_API_KEY") {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let mut answer: RunningVersions = response.json().await.ok()?;
    answer.url = server.url;
    Some(answer)
}

/// A running server's loaded plugins, as `plugins doctor` shows them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunningVersions {
    #[serde(default)]
    pub url: String,
    pub generation: u64,
    pub plugins: Vec<crate::host::LoadedVersion>,
}

impl RunningVersions {
    /// The doctor's text section.
    pub fn text(&self) -> String {
        let mut lines = vec![format!(
            "Running server {} (plugin set generation {}):",
            self.url, self.generation
        )];
        for p in &self.plugins {
            let version = if p.version.is_empty() {
                "-"
            } else {
                &p.version
            };
            let mut line = format!("  {} {version}, loaded {}", p.key, p.loaded_at);
            if p.isolated {
                line.push_str(", isolated");
            }
            if let Some(e) = &p.new_version_failed {
                line.push_str(&format!("; its new version failed to load: {e}"));
            }
            lines.push(line);
        }
        lines.join("\n")
    }
}

/// A running `--watch`: dropping it stops watching.
pub struct Watching {
    _watcher: notify::RecommendedWatcher,
    _task: tokio_util::sync::DropGuard,
}

/// Whether a changed path is one a reload looks at: not Python's caches,
/// and at the top of the home only `config.json`.
fn relevant(path: &Path, home: &Path) -> bool {
    if path.components().any(|c| c.as_os_str() == "__pycache__")
        || path.extension().is_some_and(|e| e == "pyc" || e == "tmp")
    {
        return false;
    }
    match path.parent() {
        Some(parent) if parent == home => path.file_name().is_some_and(|n| n == "config.json"),
        _ => true,
    }
}

/// Watch `host`'s plugin directories (the home's and the project's, and
/// every plugin found elsewhere) and its `config.json`; DEBOUNCE after the
/// last change, reload. Must be called inside the tokio runtime.
pub fn start(host: Arc<Host>) -> notify::Result<Watching> {
    use notify::{RecursiveMode, Watcher};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let home = host.home().to_path_buf();
    let filter_home = home.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event {
            if event.need_rescan() || event.paths.iter().any(|p| relevant(p, &filter_home)) {
                let _ = tx.send(());
            }
        }
    })?;
    let mut watched: Vec<PathBuf> = Vec::new();
    let bundled: Vec<PathBuf> = host
        .roots()
        .iter()
        .filter(|(s, _)| *s == crate::plugins::discovery::Source::Bundled)
        .map(|(_, d)| d.clone())
        .collect();
    let mut dirs: Vec<PathBuf> = host
        .roots()
        .iter()
        .filter(|(s, _)| *s != crate::plugins::discovery::Source::Bundled)
        .map(|(_, d)| d.clone())
        .collect();
    dirs.extend(host.plugins().iter().map(|p| p.path.clone()));
    for dir in dirs {
        if dir.as_os_str().is_empty()
            || bundled.iter().any(|b| dir.starts_with(b))
            || watched.iter().any(|w| dir.starts_with(w))
        {
            continue;
        }
        // A plugin directory that does not exist yet is watched from its
        // parent once it does (the home's `plugins/` is created for it).
        if !dir.exists() && std::fs::create_dir_all(&dir).is_err() {
            continue;
        }
        match watcher.watch(&dir, RecursiveMode::Recursive) {
            Ok(()) => watched.push(dir),
            Err(e) => tracing::warn!("--watch cannot watch {}: {e}", dir.display()),
        }
    }
    watcher.watch(&home, RecursiveMode::NonRecursive)?;
    tracing::info!(
        "--watch: reloading on changes under {} and {}",
        watched
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        home.join("config.json").display()
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                got = rx.recv() => if got.is_none() { return },
                () = stopped.cancelled() => return,
            }
            // Quiet for DEBOUNCE: every further change starts it again.
            loop {
                match tokio::time::timeout(DEBOUNCE, rx.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            match host.reload_now().await {
                Ok(report) if report.is_empty() => {
                    tracing::debug!("--watch: files changed, no plugin did")
                }
                Ok(report) => super::say(format_args!("plughost serve: {}", report.summary())),
                Err(e) => tracing::warn!("--watch: the reload failed: {e}"),
            }
        }
    });
    Ok(Watching {
        _watcher: watcher,
        _task: stop.drop_guard(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_config_json_counts_at_the_top_of_the_home() {
        let home = Path::new("/h");
        assert!(relevant(Path::new("/h/config.json"), home));
        assert!(!relevant(Path::new("/h/sessions.db"), home));
        assert!(relevant(Path::new("/h/plugins/p/__init__.py"), home));
        assert!(!relevant(Path::new("/h/plugins/p/__pycache__/x.pyc"), home));
    }

    #[test]
    fn the_server_file_names_this_process_and_goes_with_it() {
        let home = tempfile::tempdir().unwrap();
        let announced = announce(home.path(), "127.0.0.1:4321".parse().unwrap()).unwrap();
        let file = running_server(home.path()).unwrap();
        assert_eq!(file.url, "http://127.0.0.1:4321");
        assert_eq!(file.pid, std::process::id());
        drop(announced);
        assert!(running_server(home.path()).is_none());
    }
}
