//! The text of `plugins doctor`: [`Report::text`] and its parts.

use super::{HookCounts, PluginDiagnosis, Report};
use crate::host::PluginStatus;

impl Report {
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
                    py.interpreter.version.lines().next().unwrap_or_default(),
                    py.interpreter.executable
                ));
                out.push(format!("python prefix: {}", py.interpreter.prefix));
                for (name, origin) in &py.modules {
                    out.push(format!(
                        "{name} modules: {}",
                        origin.as_str().unwrap_or_default()
                    ));
                }
                out.push(format!("sys.path: {}", py.interpreter.path.join(":")));
            }
            None => out.push("python: not started".into()),
        }
        if !self.codumentor_load_order.is_empty() {
            out.push(format!(
                "codumentor load order: {}",
                self.codumentor_load_order.join(" → ")
            ));
        }
        out.push(String::new());
        for p in &self.plugins {
            out.extend(plugin_lines(p));
        }
        self.summary(&mut out);
        out.join("\n")
    }

    /// The tool collisions, the dialects' sections and the verdict.
    fn summary(&self, out: &mut Vec<String>) {
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
        for lines in &self.section_lines {
            out.push(String::new());
            out.extend(lines.iter().cloned());
        }
        let failed: Vec<&str> = self
            .plugins
            .iter()
            .filter(|p| p.status == PluginStatus::Failed)
            .map(|p| p.key.as_str())
            .collect();
        let off: Vec<&str> = self
            .plugins
            .iter()
            .filter(|p| {
                p.worker
                    .as_ref()
                    .is_some_and(|w| w.state == crate::isolation::WorkerState::Disabled)
            })
            .map(|p| p.key.as_str())
            .collect();
        out.push(String::new());
        if !off.is_empty() {
            out.push(format!(
                "{} isolated plugin(s) disabled by their crash breaker: {}",
                off.len(),
                off.join(", ")
            ));
        }
        out.push(if failed.is_empty() {
            if off.is_empty() {
                "No problems found.".into()
            } else {
                "No other problems found.".into()
            }
        } else {
            format!(
                "{} enabled plugin(s) failed to load: {}",
                failed.len(),
                failed.join(", ")
            )
        });
    }
}

/// One plugin's lines of the report.
fn plugin_lines(p: &PluginDiagnosis) -> Vec<String> {
    let mut out = Vec::new();
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
    if let Some(at) = &p.location {
        out.push(format!("    at: {at}"));
    }
    if let Some(tb) = &p.traceback {
        out.push("    traceback:".into());
        out.extend(tb.trim_end().lines().map(|l| format!("      {l}")));
    }
    if !p.dependencies.is_empty() {
        out.push(format!("    loads after: {}", p.dependencies.join(", ")));
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
    for env in &p.tool_requires_env {
        out.push(format!(
            "    tool {} requires_env {}: {}",
            env.tool,
            env.name,
            if env.set {
                "set"
            } else {
                "NOT set (the tool is unavailable until it is)"
            }
        ));
    }
    if !p.hook_counts.is_empty() {
        out.push(format!("    hook calls: {}", counts_text(&p.hook_counts)));
    }
    for h in &p.silent_hooks {
        out.push(format!("    hook {}: {}", h.event, h.reason));
    }
    for r in &p.not_used {
        out.push(format!("    {r}: registered, not used by this host"));
    }
    for r in &p.providers {
        out.push(format!("    {r}")); // mp5
    }
    if let Some(w) = &p.worker {
        out.push(format!("    worker: {}", worker_text(w)));
        if let Some(sandbox) = &w.sandbox {
            out.push(format!("    {sandbox}")); // issue 50
        }
        if w.fail_closed && w.state == crate::isolation::WorkerState::Disabled {
            out.push(
                "    guard: fails closed; refusing every call it guards while its breaker is open"
                    .into(),
            );
        }
    }
    for t in &p.scheduled {
        out.push(format!(
            "    scheduled task {}: every {} s under plughost serve; {} runs, {} failed, {} skipped (still running){}",
            t.name,
            t.every_seconds,
            t.runs,
            t.failures,
            t.skipped,
            t.last_error
                .as_deref()
                .map(|e| format!("; last error: {e}"))
                .unwrap_or_default()
        ));
    }
    for h in &p.hook_problems {
        out.push(format!(
            "    hook {} {}: {} of {} answers not used ({} raised, {} wrong shape, {} timed out)",
            h.event,
            h.callback,
            h.errors,
            h.calls,
            h.errors - h.wrong_shape - h.timeouts,
            h.wrong_shape,
            h.timeouts
        ));
    }
    out
}

/// `running (pid 4242), 0 crashes`, `restarting (next start in 0.2 s), …`,
/// `disabled by its breaker (3 crashes within 60 s; no retry until plughost restarts)`.
fn worker_text(w: &crate::isolation::WorkerStatus) -> String {
    use crate::isolation::WorkerState;
    let crashes = format!(
        "{} crash(es), {} within the last {} s (the breaker opens at {})",
        w.crashes, w.recent_crashes, w.breaker_window_seconds, w.breaker_crashes
    );
    match w.state {
        WorkerState::Running => match w.pid {
            Some(pid) => format!("running (pid {pid}), {crashes}"),
            None => format!("running, {crashes}"),
        },
        WorkerState::Restarting => format!(
            "restarting (the next call starts it, in {} s at the earliest), {crashes}",
            crate::core::outcome::seconds_text(std::time::Duration::from_millis(
                w.next_start_in_ms.unwrap_or(0)
            ))
        ),
        WorkerState::Disabled => format!(
            "disabled by its breaker after {} crashes within {} s (calls fail at once; no retry until plughost restarts), {} crash(es) in all",
            w.recent_crashes, w.breaker_window_seconds, w.crashes
        ),
    }
}

fn contributions(p: &PluginDiagnosis) -> String {
    crate::host::contributions_text(&p.tools, &p.hooks, &p.commands, &p.skills)
}

/// `onPromptAssemble 2, onToolInvokeStart 3 (1 not used)`: calls per event
/// (its callbacks summed), and how many answers were not used.
fn counts_text(rows: &[HookCounts]) -> String {
    let mut events: Vec<(&str, u64, u64)> = Vec::new();
    for r in rows {
        match events.iter_mut().find(|(e, _, _)| *e == r.event) {
            Some((_, calls, errors)) => {
                *calls += r.calls;
                *errors += r.errors;
            }
            None => events.push((&r.event, r.calls, r.errors)),
        }
    }
    events
        .iter()
        .map(|(event, calls, errors)| match errors {
            0 => format!("{event} {calls}"),
            n => format!("{event} {calls} ({n} not used)"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
