//! What a reload compares and announces: plugin directories' stamps,
//! `config.json`'s changed sections, and the reload event.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Map, Value};

use crate::core::registry::Registry;

/// What a plugin directory's files are now ([`crate::dialects::fresh::stamp_of`]).
pub(in crate::host) fn stamp_of(dir: &Path) -> u64 {
    crate::dialects::fresh::stamp_of(dir)
}

/// `config.json` of the home as JSON (an empty object when absent or broken).
pub(in crate::host) fn read_config(home: &Path) -> Value {
    std::fs::read_to_string(home.join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()))
}

/// The top-level sections that differ between two configs.
pub(in crate::host) fn changed_sections(old: &Value, new: &Value) -> Vec<String> {
    let empty = Map::new();
    let (old, new) = (
        old.as_object().unwrap_or(&empty),
        new.as_object().unwrap_or(&empty),
    );
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .cloned()
        .collect()
}

/// Fire [`Point::Reloaded`](crate::core::points::Point::Reloaded) on
/// `registry` with `{sections, config}` (Codumentor's `onConfigReload`).
pub(in crate::host) async fn fire_reloaded(
    registry: &Registry,
    sections: &[String],
    config: &Value,
) {
    use crate::core::hooks::{HookPayload, LoopContext};
    let mut params = Map::new();
    params.insert("sections".into(), serde_json::json!(sections));
    params.insert("config".into(), config.clone());
    let mut lc = LoopContext {
        params,
        ..Default::default()
    };
    for (lane, entries) in registry
        .hooks()
        .lanes_at(crate::core::points::Point::Reloaded)
    {
        lc.stage = Some(lane);
        crate::core::fire::fire_entries(
            entries,
            lane,
            HookPayload::Loop(&mut lc),
            registry.hook_timeout,
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_sections_are_the_differing_top_level_keys() {
        let old = serde_json::json!({"a": 1, "b": {"x": 1}, "c": 3});
        let new = serde_json::json!({"a": 1, "b": {"x": 2}, "d": 4});
        assert_eq!(changed_sections(&old, &new), ["b", "c", "d"]);
    }

    #[test]
    fn a_stamp_changes_with_a_file_and_not_with_pycache() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.py"), "x = 1\n").unwrap();
        let first = stamp_of(dir.path());
        std::fs::create_dir(dir.path().join("__pycache__")).unwrap();
        std::fs::write(dir.path().join("__pycache__/a.pyc"), "b").unwrap();
        assert_eq!(stamp_of(dir.path()), first);
        std::fs::write(dir.path().join("a.py"), "x = 22\n").unwrap();
        assert_ne!(stamp_of(dir.path()), first);
    }
}
