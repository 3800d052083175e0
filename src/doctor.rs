//! `plugins doctor` and the `/plugins` command: what was found, what loaded,
//! what each plugin registered, and what looks wrong.

use serde::Serialize;

use crate::hooks::HookEvent;
use crate::host::{Host, PluginStatus, ToolCollision};

/// One declared environment variable and whether it is set (advisory).
#[derive(Clone, Debug, Serialize)]
pub struct EnvCheck {
    pub name: String,
    pub set: bool,
}

/// A subscription that will not be called.
#[derive(Clone, Debug, Serialize)]
pub struct SilentHook {
    pub event: String,
    pub reason: String,
}

/// Everything doctor knows about one plugin.
#[derive(Clone, Debug, Serialize)]
pub struct PluginDiagnosis {
    pub key: String,
    pub source: String,
    pub path: String,
    pub status: PluginStatus,
    pub error: Option<String>,
    pub tools: Vec<String>,
    pub hooks: Vec<String>,
    pub commands: Vec<String>,
    pub skills: Vec<String>,
    pub requires_env: Vec<EnvCheck>,
    pub silent_hooks: Vec<SilentHook>,
}

/// The interpreter in use.
#[derive(Clone, Debug, Serialize)]
pub struct PythonReport {
    pub version: String,
    pub executable: String,
    pub prefix: String,
    pub path: Vec<String>,
    /// `compat` (plughost's modules) or the path of a real installation.
    pub flowly: String,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub home: String,
    pub config: String,
    pub plugin_dirs: Vec<(String, String)>,
    pub plugins: Vec<PluginDiagnosis>,
    pub tool_collisions: Vec<ToolCollision>,
    pub python: Option<PythonReport>,
}

impl Report {
    /// Diagnose a built host.
    pub fn new(host: &Host) -> Report {
        let plugins = host
            .plugins()
            .iter()
            .map(|p| PluginDiagnosis {
                key: p.key.clone(),
                source: p.source.as_str().into(),
                path: p.path.display().to_string(),
                status: p.status,
                error: p.error.clone(),
                tools: p.tools.clone(),
                hooks: p.hooks.clone(),
                commands: p.commands.clone(),
                skills: p.skills.clone(),
                requires_env: p
                    .requires_env
                    .iter()
                    .map(|n| EnvCheck {
                        name: n.clone(),
                        set: std::env::var_os(n).is_some_and(|v| !v.is_empty()),
                    })
                    .collect(),
                silent_hooks: p
                    .hooks
                    .iter()
                    .filter(|h| HookEvent::from_name(h).is_none())
                    .map(|h| SilentHook {
                        event: h.clone(),
                        reason: "not a known event: it never fires".into(),
                    })
                    .collect(),
            })
            .collect();
        Report {
            home: host.home().display().to_string(),
            config: crate::config::config_path(host.home())
                .display()
                .to_string(),
            plugin_dirs: host
                .roots()
                .iter()
                .map(|(s, p)| (s.as_str().to_string(), p.display().to_string()))
                .collect(),
            plugins,
            tool_collisions: host.collisions().to_vec(),
            python: crate::python::interpreter_report(),
        }
    }

    /// Whether any enabled plugin failed to load.
    pub fn has_failures(&self) -> bool {
        self.plugins
            .iter()
            .any(|p| p.status == PluginStatus::Failed)
    }

    /// The short status the `/plugins` command shows.
    pub fn summary_text(&self) -> String {
        if self.plugins.is_empty() {
            return "No plugins found.".into();
        }
        let mut lines = Vec::new();
        for p in &self.plugins {
            let what = contributions(p);
            let line = match (&p.status, &p.error) {
                (PluginStatus::Loaded, _) => format!(
                    "✓ {} ({}){}",
                    p.key,
                    p.source,
                    if what.is_empty() {
                        String::new()
                    } else {
                        format!(": {what}")
                    }
                ),
                (status, Some(e)) => format!("✗ {} ({}) {}: {e}", p.key, p.source, status.as_str()),
                (status, None) => format!("✗ {} ({}) {}", p.key, p.source, status.as_str()),
            };
            lines.push(line);
        }
        lines.join("\n")
    }

    /// The full human-readable report of `plugins doctor`.
    pub fn text(&self) -> String {
        let mut out = vec![
            format!("home: {}", self.home),
            format!("config: {}", self.config),
        ];
        for (source, dir) in &self.plugin_dirs {
            out.push(format!("{source} plugins: {dir}"));
        }
        match &self.python {
            Some(py) => {
                out.push(format!(
                    "python: {} ({})",
                    py.version.lines().next().unwrap_or_default(),
                    py.executable
                ));
                out.push(format!("python prefix: {}", py.prefix));
                out.push(format!("flowly modules: {}", py.flowly));
                out.push(format!("sys.path: {}", py.path.join(":")));
            }
            None => out.push("python: not started".into()),
        }
        out.push(String::new());
        for p in &self.plugins {
            out.push(format!(
                "{} [{}] {} — {}",
                p.key,
                p.source,
                p.status.as_str(),
                p.path
            ));
            if let Some(e) = &p.error {
                out.push(format!("    reason: {e}"));
            }
            let what = contributions(p);
            if !what.is_empty() {
                out.push(format!("    registered: {what}"));
            }
            for env in &p.requires_env {
                out.push(format!(
                    "    requires_env {}: {}",
                    env.name,
                    if env.set { "set" } else { "NOT set (advisory)" }
                ));
            }
            for h in &p.silent_hooks {
                out.push(format!("    hook {}: {}", h.event, h.reason));
            }
        }
        if !self.tool_collisions.is_empty() {
            out.push(String::new());
            out.push("tool name collisions (last writer wins):".into());
            for c in &self.tool_collisions {
                out.push(format!(
                    "    {}: '{}' replaced '{}'",
                    c.tool, c.winner, c.overridden
                ));
            }
        }
        let failed: Vec<&str> = self
            .plugins
            .iter()
            .filter(|p| p.status == PluginStatus::Failed)
            .map(|p| p.key.as_str())
            .collect();
        out.push(String::new());
        out.push(if failed.is_empty() {
            "No problems found.".into()
        } else {
            format!(
                "{} enabled plugin(s) failed to load: {}",
                failed.len(),
                failed.join(", ")
            )
        });
        out.join("\n")
    }
}

fn contributions(p: &PluginDiagnosis) -> String {
    let mut parts = Vec::new();
    if !p.tools.is_empty() {
        parts.push(format!("tools {}", p.tools.join(", ")));
    }
    if !p.hooks.is_empty() {
        parts.push(format!("hooks {}", p.hooks.join(", ")));
    }
    if !p.commands.is_empty() {
        parts.push(format!(
            "commands {}",
            p.commands
                .iter()
                .map(|c| format!("/{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !p.skills.is_empty() {
        parts.push(format!("skills {}", p.skills.join(", ")));
    }
    parts.join("; ")
}
