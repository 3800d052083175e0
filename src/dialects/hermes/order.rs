//! Hermes's `requires_plugins` load order, with Hermes's rules
//! (`resolve_plugin_load_order` of `hermes_cli/plugins_manifest.py`): a
//! plugin loads after the plugins it requires; the requirements are
//! advisory, so a plugin whose requirement is not enabled or installed is
//! warned about (naming it) and still loads — Hermes's answer to "is it
//! there" is `ctx.has_plugin` at run time —; a dependency on itself is
//! ignored with a warning; a cycle is warned about, naming every plugin in
//! it, and then no plugin is reordered (Hermes falls back to its plain
//! order for all of them). Plughost's plain order is discovery order
//! (alphabetical within a directory, as Hermes's ties are).
//!
//! Only the Hermes plugins that will load are reordered, among the places
//! they already had: the other dialects' plugins keep theirs. A
//! requirement met by a plugin of another dialect counts as met.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use crate::plugins::discovery::Candidate;

use super::discover::DIALECT;

/// The plugin ids `requires_plugins` of the manifest in `dir` names:
/// strings, or `{id, version_range}` mappings (Hermes's two shapes); an
/// entry of another shape is skipped with a warning, as in Hermes.
pub fn requires(dir: &Path) -> Vec<String> {
    let Some(path) = super::manifest::find(dir) else {
        return Vec::new();
    };
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Vec::new();
    };
    let Ok(root) = serde_saphyr::from_str::<Value>(&text) else {
        return Vec::new(); // the manifest's own reader reports it
    };
    let items = match root.get("requires_plugins") {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => {
            tracing::warn!(
                "{}: requires_plugins must be a list; ignoring",
                path.display()
            );
            return Vec::new();
        }
    };
    items
        .iter()
        .filter_map(|item| {
            let id = match item {
                Value::String(s) => Some(s.as_str()),
                Value::Object(m) => m.get("id").and_then(Value::as_str),
                _ => None,
            }
            .filter(|id| !id.is_empty());
            if id.is_none() {
                tracing::warn!(
                    "{}: requires_plugins entry {item} must be a plugin id string or a {{id, version_range}} mapping; skipping",
                    path.display()
                );
            }
            id.map(str::to_string)
        })
        .collect()
}

fn loads(c: &Candidate) -> bool {
    c.enabled && c.skip_reason.is_none()
}

fn manifest_name(c: &Candidate) -> Option<&str> {
    c.manifest.as_ref().ok().map(|m| m.name.as_str())
}

/// `candidates` with the Hermes plugins that load in `requires_plugins`
/// order (see the module docs); every problem is logged as a warning.
pub fn load_order(mut candidates: Vec<Candidate>) -> Vec<Candidate> {
    let slots: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].dialect == DIALECT && loads(&candidates[i]))
        .collect();
    if slots.is_empty() {
        return candidates;
    }
    // Keys first, then manifest names (Hermes resolves a name when no key matches).
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    for (n, &i) in slots.iter().enumerate() {
        by_id.insert(candidates[i].key.as_str(), n);
    }
    for (n, &i) in slots.iter().enumerate() {
        if let Some(name) = manifest_name(&candidates[i]) {
            by_id.entry(name).or_insert(n);
        }
    }
    let elsewhere = |id: &str| {
        candidates.iter().any(|c| {
            c.dialect != DIALECT && loads(c) && (c.key == id || manifest_name(c) == Some(id))
        })
    };
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); slots.len()];
    for (n, &i) in slots.iter().enumerate() {
        let key = &candidates[i].key;
        for dep in requires(&candidates[i].dir) {
            match by_id.get(dep.as_str()) {
                Some(&d) if d == n => {
                    tracing::warn!("Hermes plugin '{key}' declares a dependency on itself; ignoring")
                }
                Some(&d) => edges[n].push(d),
                None if elsewhere(&dep) => {}
                None => tracing::warn!(
                    "Hermes plugin '{key}' requires plugin '{dep}', which is not enabled or installed; loading '{key}' anyway, as Hermes does (it can check with ctx.has_plugin('{dep}')); run `plughost plugins enable {dep}` if it is installed"
                ),
            }
        }
    }
    let keys: Vec<&str> = slots.iter().map(|&i| candidates[i].key.as_str()).collect();
    let order = match sort(&edges) {
        Ok(order) => order,
        Err(cycle) => {
            let names: Vec<&str> = cycle.iter().map(|&n| keys[n]).collect();
            tracing::warn!(
                "Hermes plugin dependency cycle detected ({}); as Hermes does, every Hermes plugin loads in plain discovery order",
                names.join(" -> ")
            );
            return candidates;
        }
    };
    let mut taken: Vec<Option<Candidate>> = slots
        .iter()
        .map(|&i| Some(std::mem::replace(&mut candidates[i], placeholder())))
        .collect();
    for (&slot, n) in slots.iter().zip(order) {
        candidates[slot] = taken[n].take().expect("each plugin placed once");
    }
    candidates
}

/// A value to hold a slot while its candidate moves (always overwritten).
fn placeholder() -> Candidate {
    Candidate {
        key: String::new(),
        source: crate::plugins::discovery::Source::User,
        dir: Default::default(),
        manifest: Err(String::new()),
        enabled: false,
        skip_reason: None,
        missing: false,
        dialect: DIALECT,
    }
}

/// Topological order of `0..edges.len()` (`edges[n]`: what `n` needs
/// first), ties by index; `Err` with one cycle (its first node repeated
/// at the end) when there is one.
fn sort(edges: &[Vec<usize>]) -> Result<Vec<usize>, Vec<usize>> {
    let n = edges.len();
    let mut remaining: Vec<usize> = edges
        .iter()
        .map(|deps| {
            let mut d = deps.clone();
            d.sort_unstable();
            d.dedup();
            d.len()
        })
        .collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, deps) in edges.iter().enumerate() {
        let mut d = deps.clone();
        d.sort_unstable();
        d.dedup();
        for dep in d {
            dependents[dep].push(i);
        }
    }
    let mut placed = vec![false; n];
    let mut order = Vec::with_capacity(n);
    while let Some(i) = (0..n).find(|&i| !placed[i] && remaining[i] == 0) {
        placed[i] = true;
        order.push(i);
        for &d in &dependents[i] {
            remaining[d] -= 1;
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Walk unplaced nodes along unplaced dependencies until one repeats.
    let start = (0..n).find(|&i| !placed[i]).expect("an unplaced node");
    let mut path = vec![start];
    loop {
        let last = *path.last().expect("non-empty");
        let next = *edges[last]
            .iter()
            .find(|&&d| !placed[d])
            .expect("an unplaced node waits on an unplaced one");
        if let Some(at) = path.iter().position(|&p| p == next) {
            let mut cycle = path.split_off(at);
            cycle.push(next);
            return Err(cycle);
        }
        path.push(next);
    }
}

#[cfg(test)]
mod tests {
    use super::sort;

    #[test]
    fn dependencies_first_ties_by_index_cycles_named() {
        // 0 needs 2; 1 needs nothing; 2 needs nothing.
        assert_eq!(sort(&[vec![2], vec![], vec![]]), Ok(vec![1, 2, 0]));
        assert_eq!(sort(&[vec![], vec![]]), Ok(vec![0, 1]));
        // 0 -> 1 -> 2 -> 1: the cycle is 1, 2.
        assert_eq!(sort(&[vec![1], vec![2], vec![1]]), Err(vec![1, 2, 1]));
    }
}
