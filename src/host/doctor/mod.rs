//! `plugins doctor`: what was found, what loaded, what each plugin
//! registered, and what looks wrong. [`Report::new`] reads the host's live
//! hook counters: a `plugins doctor` process has run no turn (counts 0); a
//! program that ran turns on a host gets this process's counts.

use serde::Serialize;

pub mod child;
mod text;

use crate::host::{Host, PluginRecord, PluginStatus, ToolCollision};

/// One declared environment variable and whether it is set (advisory).
#[derive(Clone, Debug, Serialize)]
pub struct EnvCheck {
    pub name: String,
    pub set: bool,
}

/// A variable one of a plugin's tools requires (`register_tool(...,
/// requires_env=[...])`): while it is unset the tool is unavailable.
#[derive(Clone, Debug, Serialize)]
pub struct ToolEnvCheck {
    pub tool: String,
    pub name: String,
    pub set: bool,
}

/// A subscription that will not be called.
#[derive(Clone, Debug, Serialize)]
pub struct SilentHook {
    pub event: String,
    pub reason: String,
}

/// One hook callback's counters: answers not used, by reason.
#[derive(Clone, Debug, Serialize)]
pub struct HookCounts {
    pub event: String,
    pub callback: String,
    pub calls: u64,
    /// Every answer not used (raised, wrong shape, timed out).
    pub errors: u64,
    pub wrong_shape: u64,
    pub timeouts: u64,
}

/// Everything doctor knows about one plugin.
#[derive(Clone, Debug, Serialize)]
pub struct PluginDiagnosis {
    pub key: String,
    pub source: String,
    pub path: String,
    pub status: PluginStatus,
    pub error: Option<String>,
    /// `file:line` to look at when loading raised.
    pub location: Option<String>,
    /// The Python traceback when loading raised.
    pub traceback: Option<String>,
    pub tools: Vec<String>,
    pub hooks: Vec<String>,
    pub commands: Vec<String>,
    pub skills: Vec<String>,
    pub requires_env: Vec<EnvCheck>,
    /// Variables its tools require, each with whether it is set.
    pub tool_requires_env: Vec<ToolEnvCheck>,
    pub silent_hooks: Vec<SilentHook>,
    /// Plugins it loads after (Codumentor `dependencies`): the load order's edges.
    pub dependencies: Vec<String>,
    /// Hook callbacks whose answers were not all used.
    pub hook_problems: Vec<HookCounts>,
    /// Every hook callback's counters in this process (§6.2), by the
    /// plugin's own event name; a callback on several loop points is summed.
    /// A `plugins doctor` process has run no turn: its counts are 0; the
    /// `Report` of a host that ran turns shows live ones.
    pub hook_counts: Vec<HookCounts>,
    /// What its dialect accepted and this host does not use (Hermes's
    /// provider registrars): "registered, not used by this host".
    pub not_used: Vec<String>,
    /// An isolated plugin's worker: running, restarting or disabled by its
    /// breaker, with its crash counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<crate::isolation::WorkerStatus>,
    /// It declares itself a guard (`fail_closed: true`, the bundled
    /// `command-guard`): while it cannot answer, what it guards is refused.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fail_closed: bool,
    /// Its scheduled tasks (Felix `cron_tasks`) with their counters.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scheduled: Vec<TaskReport>,
    /// The providers it registered (memory, image generation, …), each
    /// with whether this host uses it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<String>,
}

/// One scheduled task and what its runs did in this process.
#[derive(Clone, Debug, Serialize)]
pub struct TaskReport {
    pub name: String,
    pub every_seconds: f64,
    pub runs: u64,
    pub failures: u64,
    /// Ticks skipped because the previous run had not finished.
    pub skipped: u64,
    pub last_error: Option<String>,
}

/// The interpreter in use, and where each plugin API's modules come from.
#[derive(Clone, Debug, Serialize)]
pub struct PythonReport {
    #[serde(flatten)]
    pub interpreter: crate::runtime::InterpreterReport,
    /// Per dialect whose modules doctor shows (`flowly`, `codumentor`,
    /// `felix`, in that order; [`crate::dialects::abilities::Doctor::modules_rank`]):
    /// `compat` (plughost's modules), the path of a real installation, or
    /// `not loaded`.
    #[serde(flatten)]
    pub modules: serde_json::Map<String, serde_json::Value>,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub home: String,
    pub config: String,
    pub plugin_dirs: Vec<(String, String)>,
    pub plugins: Vec<PluginDiagnosis>,
    pub tool_collisions: Vec<ToolCollision>,
    /// The Codumentor plugins that loaded, in the order they were built and
    /// registered (dependencies, then priority, then discovery).
    pub codumentor_load_order: Vec<String>,
    pub python: Option<PythonReport>,
    /// Each dialect's own section, by its key ([`crate::dialects::abilities::Doctor::section`]:
    /// Flowly's `web`, per capability the web providers and which one is
    /// active, null when no plugin declares any).
    #[serde(flatten)]
    pub sections: serde_json::Map<String, serde_json::Value>,
    /// The sections' lines of the text report, in the same order.
    #[serde(skip)]
    pub section_lines: Vec<Vec<String>>,
}

impl Report {
    /// Diagnose a built host.
    pub fn new(host: &Host) -> Report {
        let plugins = host.plugins().iter().map(|p| diagnose(host, p)).collect();
        let records = host.plugins();
        let seen: Vec<crate::dialects::DoctorPlugin<'_>> =
            records.iter().map(PluginRecord::doctor_view).collect();
        let (mut sections, mut section_lines) = (serde_json::Map::new(), Vec::new());
        for section in crate::dialects::doctor_sections(host.home(), &seen) {
            sections.insert(section.key.to_string(), section.json);
            section_lines.extend(section.lines);
        }
        if let Some((json, lines)) = crate::mcp_client::doctor_section(host.extensions()) {
            sections.insert("mcp_servers".into(), json);
            section_lines.push(lines);
        }
        Report {
            home: host.home().display().to_string(),
            config: crate::plugins::config::config_path(host.home())
                .display()
                .to_string(),
            plugin_dirs: host
                .roots()
                .iter()
                .map(|(s, p)| (s.as_str().to_string(), p.display().to_string()))
                .collect(),
            codumentor_load_order: host
                .plugins()
                .iter()
                .filter(|p| {
                    p.loaded
                        && p.dialect.and_then(crate::dialects::by_id).is_some_and(|d| {
                            d.abilities().doctor.is_some_and(|x| x.shows_load_order())
                        })
                })
                .map(|p| p.key.clone())
                .collect(),
            plugins,
            tool_collisions: host.collisions().to_vec(),
            python: crate::runtime::interpreter_report().map(|interpreter| PythonReport {
                interpreter,
                modules: crate::dialects::doctor_modules()
                    .into_iter()
                    .map(|(name, origin)| (name.to_string(), origin.into()))
                    .collect(),
            }),
            sections,
            section_lines,
        }
    }

    /// Whether any enabled plugin failed to load.
    pub fn has_failures(&self) -> bool {
        self.plugins
            .iter()
            .any(|p| p.status == PluginStatus::Failed)
    }
}

/// Everything doctor says about the plugin `p` of `host`.
fn diagnose(host: &Host, p: &PluginRecord) -> PluginDiagnosis {
    // What an isolated plugin's worker recorded of it.
    let recorded = host
        .extensions()
        .peek::<crate::isolation::WorkerReports>()
        .and_then(|r| r.of(&p.key));
    PluginDiagnosis {
        key: p.key.clone(),
        source: p.source.as_str().into(),
        path: p.path.display().to_string(),
        status: p.status,
        error: p.error.clone(),
        location: p.failure.as_ref().and_then(|f| f.location.clone()),
        traceback: p.failure.as_ref().and_then(|f| f.traceback.clone()),
        tools: p.tools.clone(),
        hooks: p.hooks.clone(),
        commands: p.commands.clone(),
        skills: p.skills.clone(),
        requires_env: p
            .requires_env
            .iter()
            .map(|n| EnvCheck {
                name: n.clone(),
                set: env_set(n),
            })
            .collect(),
        tool_requires_env: host
            .registry()
            .tools()
            .into_iter()
            .filter(|t| t.spec.plugin == p.key && p.tools.contains(&t.spec.name))
            .flat_map(|t| {
                t.spec.requires_env.iter().map(|n| ToolEnvCheck {
                    tool: t.spec.name.clone(),
                    name: n.clone(),
                    set: env_set(n),
                })
            })
            .collect(),
        silent_hooks: p
            .hooks
            .iter()
            .filter_map(|h| {
                let reason = match p.dialect.and_then(crate::dialects::by_id) {
                    Some(dialect) => dialect.never_fires(h),
                    None => crate::dialects::seed_never_fires(h),
                }?;
                Some(SilentHook {
                    event: h.clone(),
                    reason: reason.into(),
                })
            })
            .collect(),
        dependencies: p.dependencies.clone(),
        hook_problems: host
            .registry()
            .hooks()
            .iter()
            .filter(|(_, h)| h.owner == p.key && h.stats.errors() > 0)
            .map(|(event, h)| HookCounts {
                event,
                callback: h.label.clone(),
                calls: h.stats.calls(),
                errors: h.stats.errors(),
                wrong_shape: h.stats.wrong_shape(),
                timeouts: h.stats.timeouts(),
            })
            .collect(),
        hook_counts: hook_counts(host, &p.key),
        not_used: with_worker_lines(
            crate::dialects::not_used(host.extensions(), &p.key),
            recorded.as_ref().map(|w| w.1.clone()),
        ),
        worker: host.worker_status(&p.key),
        scheduled: host
            .registry()
            .tasks()
            .iter()
            .filter(|t| t.plugin == p.key)
            .map(|t| TaskReport {
                name: t.name.clone(),
                every_seconds: t.every.as_secs_f64(),
                runs: t.stats.runs(),
                failures: t.stats.failures(),
                skipped: t.stats.overlaps(),
                last_error: t.stats.last_error(),
            })
            .collect(),
        fail_closed: crate::isolation::guard::declares_guard(&p.key, p.source, &p.path),
        providers: with_worker_lines(
            crate::dialects::providers(host.extensions(), &p.key), // mp5
            recorded.map(|w| w.0),
        ),
    }
}

/// `lines` the host recorded, then those of the plugin's worker it did not
/// (an isolated plugin's dialect state is in its worker).
fn with_worker_lines(mut lines: Vec<String>, worker: Option<Vec<String>>) -> Vec<String> {
    for line in worker.unwrap_or_default() {
        if !lines.contains(&line) {
            lines.push(line);
        }
    }
    lines
}

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Every hook callback of plugin `key` with its counters: named by the
/// plugin's own event name, one row per (event, callback), summed over the
/// loop points one subscription sits on.
fn hook_counts(host: &Host, key: &str) -> Vec<HookCounts> {
    let registry = host.registry();
    let hooks = registry.hooks();
    let fired = hooks.subscriptions().map(|(e, h)| (h.event_shown(e), h));
    let listed = hooks
        .unknown()
        .iter()
        .flat_map(|(name, v)| v.iter().map(move |h| (name.clone(), h)));
    let mut rows: Vec<HookCounts> = Vec::new();
    for (event, h) in fired.chain(listed) {
        if h.owner != key {
            continue;
        }
        let at = match rows
            .iter()
            .position(|r| r.event == event && r.callback == h.label)
        {
            Some(i) => i,
            None => {
                rows.push(HookCounts {
                    event,
                    callback: h.label.clone(),
                    calls: 0,
                    errors: 0,
                    wrong_shape: 0,
                    timeouts: 0,
                });
                rows.len() - 1
            }
        };
        let row = &mut rows[at];
        row.calls += h.stats.calls();
        row.errors += h.stats.errors();
        row.wrong_shape += h.stats.wrong_shape();
        row.timeouts += h.stats.timeouts();
    }
    rows
}
