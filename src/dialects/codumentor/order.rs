//! Codumentor load order: `dependencies` first (topologically), then
//! `priority` (lower first, default 100), then discovery order.
//!
//! Codumentor plugins load after the other dialects' plugins, so a
//! dependency on any plugin key (of any dialect) is settled by the time a
//! Codumentor plugin's turn comes. A plugin in a dependency cycle is kept
//! out with `dependency cycle: a → b → a`; one whose dependency is missing,
//! disabled or failed with `dependency '<key>' is not loaded (…)`.
//!
//! Loading is two-phase ([`load_order_importing`]): the order is resolved
//! from the manifests, each in-process Codumentor plugin's module is then
//! imported in that order (its class not built) to read the class's
//! `meta["dependencies"]` (spec §2.1: added to the manifest's), and the order
//! is resolved again with them. Plugins in an isolated worker are not
//! imported in the host, so only their manifest's dependencies count.

use std::collections::{HashMap, HashSet};

use crate::plugins::discovery::Candidate;

use super::DIALECT;
use crate::plugins::format::Verdict;

/// The default `priority` (§7 D1: lower runs first; the seed's example
/// values, 10 and 50, mean "early").
pub const DEFAULT_PRIORITY: i64 = 100;

/// A candidate's dependencies: its manifest's, then those only its class's
/// `meta["dependencies"]` names (none for other dialects).
pub fn dependencies(c: &Candidate) -> Vec<String> {
    match &c.manifest {
        Ok(m) if c.dialect == DIALECT => {
            super::with_meta_dependencies(&m.dialect.dependencies, &c.dir)
        }
        _ => Vec::new(),
    }
}

/// Undo the import of a plugin kept out before its load.
fn release_prepared(c: &Candidate) {
    if let Ok(Some(entry)) = c.manifest.as_ref().map(|m| m.dialect.entry.as_deref()) {
        super::release_prepared(&c.key, &c.dir, entry);
    }
}

/// [`load_order`] in two phases: resolved from the manifests, then, once
/// every in-process Codumentor module (`isolated(key)` false) is imported
/// in that order and its class's `meta["dependencies"]` read, resolved again
/// from the discovery order. An import that fails is reported when the
/// plugin's turn to load comes, as any load failure.
pub fn load_order_importing(
    candidates: Vec<Candidate>,
    isolated: impl Fn(&str) -> bool,
) -> Vec<Candidate> {
    let discovery: HashMap<String, usize> = candidates
        .iter()
        .enumerate()
        .rev()
        .map(|(i, c)| (c.key.clone(), i))
        .collect();
    let first = load_order(candidates);
    if crate::runtime::Runtime::get().is_none() {
        return first; // no plugin runs in this process
    }
    let mut imported = false;
    for c in &first {
        if c.dialect != DIALECT || !c.enabled || c.skip_reason.is_some() || isolated(&c.key) {
            continue;
        }
        if let Ok(Some(entry)) = c.manifest.as_ref().map(|m| m.dialect.entry.as_deref()) {
            super::prepare(&c.key, &c.dir, entry);
            imported = true;
        }
    }
    if !imported {
        return first;
    }
    let mut again = first;
    again.sort_by_key(|c| discovery.get(&c.key).copied().unwrap_or(usize::MAX));
    load_order(again)
}

fn priority(c: &Candidate) -> i64 {
    match &c.manifest {
        Ok(m) => m.dialect.priority.unwrap_or(DEFAULT_PRIORITY),
        Err(_) => DEFAULT_PRIORITY,
    }
}

/// Reorder `candidates` for loading: every non-Codumentor candidate keeps
/// its place, then the Codumentor ones follow in dependency, priority and
/// discovery order. Candidates in a cycle get the cycle as their reason.
pub fn load_order(candidates: Vec<Candidate>) -> Vec<Candidate> {
    let (mut ordered, ours): (Vec<Candidate>, Vec<Candidate>) =
        candidates.into_iter().partition(|c| c.dialect != DIALECT);
    let index: HashMap<String, usize> = ours
        .iter()
        .enumerate()
        .map(|(i, c)| (c.key.clone(), i))
        .collect();
    // Edges to Codumentor plugins only: the others load first anyway.
    let edges: Vec<Vec<usize>> = ours
        .iter()
        .map(|c| {
            dependencies(c)
                .iter()
                .filter_map(|d| index.get(d).copied())
                .collect()
        })
        .collect();
    let cycles = find_cycles(&ours, &edges);
    let mut ours: Vec<Option<Candidate>> = ours.into_iter().map(Some).collect();
    for (i, cycle) in &cycles {
        if let Some(c) = ours[*i].as_mut() {
            if c.enabled && c.skip_reason.is_none() {
                c.skip_reason = Some(Verdict::Unloadable(format!("dependency cycle: {cycle}")));
                release_prepared(c);
            }
        }
    }
    // Kahn's algorithm, always taking the ready node of lowest
    // (priority, discovery index); nodes in cycles come last, in order.
    let mut remaining: Vec<usize> = edges.iter().map(Vec::len).collect();
    let mut placed = vec![false; ours.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); ours.len()];
    for (i, deps) in edges.iter().enumerate() {
        for &d in deps {
            dependents[d].push(i);
        }
    }
    let prio: Vec<i64> = ours
        .iter()
        .map(|c| c.as_ref().map(priority).unwrap_or(DEFAULT_PRIORITY))
        .collect();
    loop {
        let next = (0..ours.len())
            .filter(|&i| !placed[i] && remaining[i] == 0)
            .min_by_key(|&i| (prio[i], i));
        let Some(i) = next else { break };
        placed[i] = true;
        for &d in &dependents[i] {
            remaining[d] = remaining[d].saturating_sub(1);
        }
        ordered.extend(ours[i].take());
    }
    ordered.extend(ours.into_iter().flatten());
    ordered
}

/// For every candidate on a dependency cycle, the cycle as text
/// (`a → b → a`, starting at that candidate).
fn find_cycles(ours: &[Candidate], edges: &[Vec<usize>]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for start in 0..ours.len() {
        if let Some(path) = path_back(start, edges) {
            let names: Vec<&str> = path.iter().map(|&i| ours[i].key.as_str()).collect();
            found.push((start, names.join(" → ")));
        }
    }
    found
}

/// A shortest path `start → … → start`, if there is one (breadth first).
fn path_back(start: usize, edges: &[Vec<usize>]) -> Option<Vec<usize>> {
    let mut previous: HashMap<usize, usize> = HashMap::new();
    let mut seen = HashSet::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &next in &edges[node] {
            if next == start {
                let mut path = vec![start];
                let mut at = node;
                while at != start {
                    path.push(at);
                    at = previous[&at];
                }
                path.push(start);
                let last = path.len() - 1;
                path[1..last].reverse();
                return Some(path);
            }
            if seen.insert(next) {
                previous.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    None
}

pub use crate::dialects::DependencyState;

/// Keep `c` out when one of its dependencies did not load: `state_of(key)`
/// tells what became of the plugin `key` handled before it (the load order
/// puts dependencies first; `None` when no plugin of that key was found).
pub fn check_dependencies(
    mut c: Candidate,
    state_of: impl Fn(&str) -> Option<DependencyState>,
) -> Candidate {
    if c.dialect != DIALECT || !c.enabled || c.skip_reason.is_some() {
        return c;
    }
    for dep in dependencies(&c) {
        let why = match state_of(&dep) {
            Some(DependencyState::Loaded) => continue,
            Some(DependencyState::Disabled) => "disabled in config".to_string(),
            Some(DependencyState::NotEnabled) => {
                format!("not enabled; run: plughost plugins enable {dep}")
            }
            Some(DependencyState::Failed(error)) => format!(
                "it failed: {}",
                error.as_deref().unwrap_or("it did not load")
            ),
            None => "no plugin with that key was found".to_string(),
        };
        c.skip_reason = Some(Verdict::Unloadable(format!(
            "dependency '{dep}' is not loaded ({why})"
        )));
        release_prepared(&c);
        break;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::discovery::Source;
    use crate::plugins::manifest::{DialectFields, Manifest, PluginKind};

    fn cand(key: &str, deps: &[&str], priority: Option<i64>) -> Candidate {
        Candidate {
            key: key.into(),
            source: Source::User,
            dir: key.into(),
            manifest: Ok(Manifest {
                name: key.into(),
                version: String::new(),
                manifest_version: 1,
                description: String::new(),
                author: String::new(),
                kind: PluginKind::Standalone,
                requires_env: vec![],
                provides_tools: vec![],
                provides_hooks: vec![],
                provides_web_providers: vec![],
                dialect: DialectFields {
                    name: Some(DIALECT.to_string()),
                    entry: Some("m:C".into()),
                    dependencies: deps.iter().map(|d| d.to_string()).collect(),
                    priority,
                    args: Default::default(),
                },
                path: "plugin.yaml".into(),
                warnings: vec![],
            }),
            enabled: true,
            skip_reason: None,
            missing: false,
            dialect: DIALECT,
        }
    }

    fn keys(v: &[Candidate]) -> Vec<&str> {
        v.iter().map(|c| c.key.as_str()).collect()
    }

    #[test]
    fn dependencies_then_priority_then_discovery() {
        let order = load_order(vec![
            cand("app", &["base"], Some(1)),
            cand("late", &[], None),
            cand("base", &[], Some(50)),
            cand("early", &[], Some(10)),
        ]);
        assert_eq!(keys(&order), ["early", "base", "app", "late"]);
    }

    #[test]
    fn cycles_are_named_from_each_member() {
        let order = load_order(vec![
            cand("a", &["b"], None),
            cand("b", &["a"], None),
            cand("c", &["a"], None),
            cand("d", &["d"], None),
        ]);
        let reason = |k: &str| {
            order
                .iter()
                .find(|c| c.key == k)
                .unwrap()
                .skip_reason
                .clone()
        };
        assert_eq!(reason("a").as_deref(), Some("dependency cycle: a → b → a"));
        assert_eq!(reason("b").as_deref(), Some("dependency cycle: b → a → b"));
        assert_eq!(reason("d").as_deref(), Some("dependency cycle: d → d"));
        assert_eq!(
            reason("c"),
            None,
            "c is not on the cycle; its dependency fails it"
        );
    }
}
