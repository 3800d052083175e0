//! Plugins that declare themselves guards fail closed: while such a
//! plugin cannot answer (it raised, timed out, its worker crashed, or its
//! breaker is open and its calls fail at once), the events it guards are
//! refused with the reason, never let through. A guard is the bundled
//! `command-guard`, or any plugin whose manifest says `fail_closed: true`
//! (`docs/reliability.md`). A dialect's own fail-closed rule (Hermes's
//! `pre_tool_call` guards) comes first.

use std::path::Path;

use crate::core::hooks::{HookAction, HookError, HookEvent};
use crate::plugins::discovery::Source;

/// The bundled plugins that are guards.
const BUNDLED_GUARDS: &[&str] = &["command-guard"];

/// Whether the plugin `key` in `dir` declares itself a guard.
pub fn declares_guard(key: &str, source: Source, dir: &Path) -> bool {
    if source == Source::Bundled && BUNDLED_GUARDS.contains(&key) {
        return true;
    }
    ["plugin.yaml", "plugin.yml", "plugin.json"]
        .iter()
        .map(|name| dir.join(name))
        .find(|p| crate::plugins::snapshot::is_file(p))
        .and_then(|p| {
            let bytes = crate::plugins::snapshot::read_regular(&p).ok()?;
            let text = std::str::from_utf8(&bytes).ok()?;
            // Most manifests do not mention it: no parse (every start
            // asks for every plugin).
            if !text.contains("fail_closed") {
                return None;
            }
            let doc: serde_json::Value = if p.extension().is_some_and(|e| e == "json") {
                serde_json::from_str(text).ok()?
            } else {
                serde_saphyr::from_str(text).ok()?
            };
            doc.get("fail_closed")?.as_bool()
        })
        .unwrap_or(false)
}

/// The refusal guard `key` stands for when its callback on `event` failed
/// with `error`; `None` for an event that refuses nothing.
pub fn refusal(key: &str, event: HookEvent, error: &HookError) -> Option<HookAction> {
    let reason =
        format!("guard plugin '{key}' could not check this ({error}); refused: it fails closed");
    crate::core::fire::refusal(event.spec(), reason)
}
