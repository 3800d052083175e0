//! What a reload reports: each plugin's loaded version, and what changed.

use serde::Serialize;
use std::time::SystemTime;

/// A loaded plugin's version, as a running server reports it.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct LoadedVersion {
    pub key: String,
    pub version: String,
    /// UTC, RFC 3339.
    pub loaded_at: String,
    pub isolated: bool,
    /// Set when the plugin's files changed but the new version failed to
    /// load, so this (older) version still runs: why it failed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub new_version_failed: Option<String>,
}

/// What a reload changed (`POST /admin/reload` answers it).
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ReloadReport {
    /// The set's generation after the reload.
    pub generation: u64,
    /// Plugins loaded that the previous set did not have.
    pub added: Vec<String>,
    /// Plugins whose new version replaced the old one.
    pub changed: Vec<String>,
    /// Plugins unloaded (gone, disabled or no longer enabled).
    pub removed: Vec<String>,
    /// Plugins whose new version failed: the old one keeps running.
    pub failed: Vec<FailedReload>,
    /// New plugins that failed to load (there is no old version to keep).
    pub not_loaded: Vec<FailedReload>,
    /// Top-level sections of `config.json` that changed.
    pub config_sections: Vec<String>,
}

impl ReloadReport {
    /// One line per kind of change, for `/reload-plugins` and the CLI.
    pub fn summary(&self) -> String {
        if self.is_empty() {
            return format!(
                "Plugins reloaded (generation {}): nothing changed.",
                self.generation
            );
        }
        let mut lines = vec![format!(
            "Plugins reloaded (generation {}):",
            self.generation
        )];
        for (what, keys) in [
            ("added", &self.added),
            ("changed", &self.changed),
            ("removed", &self.removed),
            ("config sections changed", &self.config_sections),
        ] {
            if !keys.is_empty() {
                lines.push(format!("  {what}: {}", keys.join(", ")));
            }
        }
        for f in &self.failed {
            lines.push(format!(
                "  kept at the old version (the new one failed): {}: {}",
                f.key, f.error
            ));
        }
        for f in &self.not_loaded {
            lines.push(format!("  not loaded: {}: {}", f.key, f.error));
        }
        lines.join("\n")
    }

    /// Whether anything changed at all.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.changed.is_empty()
            && self.removed.is_empty()
            && self.failed.is_empty()
            && self.not_loaded.is_empty()
            && self.config_sections.is_empty()
    }
}

/// One plugin that did not load in a reload, and why.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct FailedReload {
    pub key: String,
    pub error: String,
}

/// `2026-12-01T19:41:10.123Z` (UTC, milliseconds): when a plugin loaded.
pub(super) fn rfc3339(at: SystemTime) -> String {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_a_known_instant() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_764_618_070_123);
        assert_eq!(rfc3339(at), "2025-12-01T19:41:10.123Z");
    }
}
