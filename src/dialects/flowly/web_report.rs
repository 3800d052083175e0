//! `plugins doctor`'s view of the web tools ([`WebReport`]): which
//! providers serve `web_search` / `web_extract`, and why a declared one is
//! missing.

use serde::Serialize;

use super::web::provider_states;
use super::web::CapabilityState;
use crate::dialects::{DependencyState, DoctorPlugin};

/// A provider a backend plugin declares but that is not registered: its
/// plugin is disabled, not enabled, skipped or failed.
#[derive(Clone, Debug, Serialize)]
pub struct Unregistered {
    pub name: String,
    pub plugin: String,
    pub reason: String,
}

/// `plugins doctor`'s view of the web tools, per capability.
#[derive(Clone, Debug, Serialize)]
pub struct WebReport {
    pub search: CapabilityState,
    pub extract: CapabilityState,
    pub not_registered: Vec<Unregistered>,
    /// Why the registry could not be asked (Python failed), if so.
    pub problem: Option<String>,
}

impl WebReport {
    /// The report for the host at `home` whose plugins are `plugins`;
    /// None when no plugin declares a web provider.
    pub fn new(home: &std::path::Path, plugins: &[DoctorPlugin<'_>]) -> Option<WebReport> {
        let declared: Vec<&DoctorPlugin<'_>> = plugins
            .iter()
            .filter(|p| !p.provides_web_providers.is_empty())
            .collect();
        if declared.is_empty() {
            return None;
        }
        let owner = |name: &str| {
            declared
                .iter()
                .find(|p| p.loaded && p.provides_web_providers.iter().any(|n| n == name))
                .map(|p| p.key.to_string())
        };
        let mut report = WebReport {
            search: CapabilityState::default(),
            extract: CapabilityState::default(),
            not_registered: Vec::new(),
            problem: None,
        };
        match provider_states(home) {
            None => {}
            Some(Err(problem)) => report.problem = Some(problem),
            Some(Ok((search, extract))) => {
                report.search = search;
                report.extract = extract;
            }
        }
        for state in [&mut report.search, &mut report.extract] {
            for p in &mut state.providers {
                p.plugin = owner(&p.name);
            }
        }
        let registered = |name: &str| {
            report
                .search
                .providers
                .iter()
                .chain(&report.extract.providers)
                .any(|p| p.name == name)
        };
        let mut missing = Vec::new();
        for p in &declared {
            for name in p.provides_web_providers {
                if registered(name) {
                    continue;
                }
                let reason = match &p.state {
                    DependencyState::Loaded => {
                        "its plugin loaded but did not register it".to_string()
                    }
                    DependencyState::Disabled => "its plugin is disabled".into(),
                    DependencyState::NotEnabled => format!(
                        "its plugin is not enabled (plughost plugins enable {})",
                        p.key
                    ),
                    DependencyState::Failed(error) => format!(
                        "its plugin {}: {}",
                        p.status_text,
                        error.as_deref().unwrap_or("no reason recorded")
                    ),
                };
                missing.push(Unregistered {
                    name: name.clone(),
                    plugin: p.key.to_string(),
                    reason,
                });
            }
        }
        report.not_registered = missing;
        Some(report)
    }

    /// The report's lines for `plugins doctor`.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec!["web providers:".to_string()];
        if let Some(problem) = &self.problem {
            out.push(format!(
                "    could not ask the provider registry: {problem}"
            ));
        }
        for (capability, state) in [("search", &self.search), ("extract", &self.extract)] {
            let active = match (&state.active, &state.configured) {
                (Some(name), _) => format!("active: {name}"),
                (None, Some(name)) => format!("configured: {name}, which is unavailable"),
                (None, None) => format!("none available: web_{capability} is not offered"),
            };
            out.push(format!("  {capability} — {active}"));
            for p in &state.providers {
                let from = p
                    .plugin
                    .as_deref()
                    .map(|k| format!(" [{k}]"))
                    .unwrap_or_default();
                out.push(if p.available {
                    format!("    {} ({}){from}: available", p.name, p.display_name)
                } else {
                    format!(
                        "    {} ({}){from}: unavailable — {}",
                        p.name, p.display_name, p.reason
                    )
                });
            }
        }
        for u in &self.not_registered {
            out.push(format!(
                "  {} [{}]: not registered — {}",
                u.name, u.plugin, u.reason
            ));
        }
        out
    }
}
