//! The layout of `src/` shows the architecture (issue 20, item 4): no
//! import cycle between its top-level modules, no Python in `core/` and
//! `plugins/`, and no file outside `src/dialects/` naming a dialect's
//! module except the dialect table. Plain Rust reading the sources: an
//! edge is a `crate::<module>` path in code (comments and `#[cfg(test)]`
//! modules left out).
//!
//! Assertions that still fail because of files other branches are
//! rewriting are separate, ignored tests naming the edge they wait for.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The dialect modules no file outside `src/dialects/` may name.
const DIALECT_MODULES: [&str; 5] = [
    "dialects::flowly",
    "dialects::hermes",
    "dialects::felix",
    "dialects::codumentor",
    "dialects::bundle",
];

struct Source {
    /// Relative to `src/`, with `/` separators.
    rel: String,
    /// The code without comments and `#[cfg(test)]` modules.
    code: String,
}

fn sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&p).unwrap();
            Source {
                rel,
                code: without_tests(&without_comments(&text)),
            }
        })
        .collect()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` without `//` and `/* */` comments (string literals kept as they
/// are: a `//` inside one is rare enough in paths that matter here).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let (mut i, mut in_str) = (0, false);
    while i < bytes.len() {
        let c = bytes[i];
        if in_str {
            out.push(c as char);
            if c == b'\\' && i + 1 < bytes.len() {
                out.push(bytes[i + 1] as char);
                i += 2;
                continue;
            }
            if c == b'"' {
                in_str = false;
            }
            i += 1;
        } else if c == b'"' {
            in_str = true;
            out.push('"');
            i += 1;
        } else if text[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if text[i..].starts_with("/*") {
            let end = text[i + 2..]
                .find("*/")
                .map_or(bytes.len(), |e| i + 2 + e + 2);
            i = end;
        } else {
            // Keep multi-byte characters whole.
            let ch = text[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// `code` without its `#[cfg(test)] mod … { … }` blocks (matched braces).
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        if !trimmed.starts_with("mod ") {
            out.push_str("#[cfg(test)]");
            rest = after;
            continue;
        }
        let Some(open) = after.find('{') else {
            rest = "";
            break;
        };
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The top-level module of a file (`core/hooks.rs` → `core`).
fn top(rel: &str) -> &str {
    rel.split('/').next().unwrap().trim_end_matches(".rs")
}

/// Every `crate::<module>` edge between top-level modules, with the files
/// that make it: `(from, to) → files`.
fn edges(sources: &[Source]) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for s in sources {
        let from = top(&s.rel);
        if from == "lib" || from == "main" {
            continue;
        }
        for to in crate_paths(&s.code) {
            if to != from {
                edges
                    .entry((from.to_string(), to))
                    .or_default()
                    .insert(s.rel.clone());
            }
        }
    }
    edges
}

/// The modules `code` names as `crate::<module>` or in `crate::{a, b::c}`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let boundary = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        rest = &rest[at + "crate::".len()..];
        if !boundary {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    found.insert(name.to_string());
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.insert(name.to_string());
            }
        }
    }
    found
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The files that make the edge `from → to`, if any.
fn edge_files(from: &str, to: &str) -> Vec<String> {
    edges(&sources())
        .get(&(from.to_string(), to.to_string()))
        .map(|f| f.iter().cloned().collect())
        .unwrap_or_default()
}

/// Strongly connected groups of more than one module (Tarjan).
fn cycles(edges: &BTreeMap<(String, String), BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        graph.entry(from).or_default().push(to);
        graph.entry(to).or_default();
    }
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(v: &'a str, graph: &BTreeMap<&'a str, Vec<&'a str>>, st: &mut State<'a>) {
        st.index.insert(v, st.next);
        st.low.insert(v, st.next);
        st.next += 1;
        st.stack.push(v);
        for &w in &graph[v] {
            if !st.index.contains_key(w) {
                visit(w, graph, st);
                let low = st.low[v].min(st.low[w]);
                st.low.insert(v, low);
            } else if st.stack.contains(&w) {
                let low = st.low[v].min(st.index[w]);
                st.low.insert(v, low);
            }
        }
        if st.low[v] == st.index[v] {
            let mut group = Vec::new();
            while let Some(w) = st.stack.pop() {
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                st.found.push(group);
            }
        }
    }
    let mut st = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for &v in graph.keys() {
        if !st.index.contains_key(v) {
            visit(v, &graph, &mut st);
        }
    }
    st.found
}

/// Files under `src/` outside `src/dialects/` that name a dialect module,
/// among those `keep` selects.
fn naming_a_dialect(keep: impl Fn(&str) -> bool) -> Vec<String> {
    sources()
        .into_iter()
        .filter(|s| !s.rel.starts_with("dialects/") && keep(&s.rel))
        .filter(|s| DIALECT_MODULES.iter().any(|m| s.code.contains(m)))
        .map(|s| s.rel)
        .collect()
}

fn with_pyo3(dir: &str, except: &[&str]) -> Vec<String> {
    sources()
        .into_iter()
        .filter(|s| s.rel.starts_with(dir) && !except.contains(&s.rel.as_str()))
        .filter(|s| s.code.contains("pyo3"))
        .map(|s| s.rel)
        .collect()
}

#[test]
fn the_reader_sees_edges_and_cycles() {
    let code = without_tests(&without_comments(
        "use crate::{core::x, plugins};\n// crate::host\n/* crate::agent */\nfn f() { crate::runtime::g(); }\n#[cfg(test)]\nmod tests { use crate::serve; }\n",
    ));
    let names: Vec<String> = crate_paths(&code).into_iter().collect();
    assert_eq!(names, ["core", "plugins", "runtime"]);
    let mut e = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        e.insert((a.to_string(), b.to_string()), BTreeSet::new());
    }
    assert_eq!(cycles(&e), vec![vec!["a", "b", "c"]]);
}

#[test]
fn the_plugin_layer_asks_no_dialect() {
    assert_eq!(edge_files("plugins", "dialects"), Vec::<String>::new());
    assert_eq!(edge_files("plugins", "isolation"), Vec::<String>::new());
    assert_eq!(edge_files("plugins", "host"), Vec::<String>::new());
    let plugin_files = |rel: &str| rel.starts_with("plugins/");
    assert_eq!(naming_a_dialect(plugin_files), Vec::<String>::new());
}

#[test]
fn the_plugin_layer_uses_only_the_core() {
    assert_eq!(edge_files("plugins", "runtime"), Vec::<String>::new());
}

#[test]
fn outcomes_depend_on_nothing_above_the_core() {
    let outcome: Vec<String> = edges(&sources())
        .iter()
        .filter(|(_, files)| files.contains("core/outcome.rs"))
        .map(|((_, to), _)| to.clone())
        .collect();
    assert_eq!(outcome, Vec::<String>::new());
    assert_eq!(edge_files("core", "isolation"), Vec::<String>::new());
}

#[test]
fn the_core_depends_on_nothing() {
    let from_core: Vec<_> = edges(&sources())
        .into_keys()
        .filter(|(from, _)| from == "core")
        .collect();
    assert_eq!(from_core, Vec::<(String, String)>::new());
}

#[test]
fn isolation_is_dialect_agnostic() {
    assert_eq!(edge_files("isolation", "host"), Vec::<String>::new());
    let isolation = |rel: &str| rel.starts_with("isolation/");
    assert_eq!(naming_a_dialect(isolation), Vec::<String>::new());
    for s in sources().iter().filter(|s| s.rel.starts_with("isolation/")) {
        for name in ["codumentor", "hermes", "felix"] {
            assert!(
                !s.code.to_lowercase().contains(name),
                "{} names {name}",
                s.rel
            );
        }
    }
}

#[test]
fn core_and_plugins_have_no_python_but_the_entry_points_scan() {
    assert_eq!(with_pyo3("core/", &[]), Vec::<String>::new());
    assert_eq!(
        with_pyo3("plugins/", &["plugins/entry_points.rs"]),
        Vec::<String>::new()
    );
}

#[test]
fn core_and_plugins_have_no_python() {
    assert_eq!(with_pyo3("core/", &[]), Vec::<String>::new());
    assert_eq!(with_pyo3("plugins/", &[]), Vec::<String>::new());
}

#[test]
fn no_file_outside_the_dialects_names_a_dialect() {
    assert_eq!(naming_a_dialect(|_| true), Vec::<String>::new());
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    assert_eq!(cycles(&edges(&sources())), Vec::<Vec<String>>::new());
}

/// `cluster` sits between `host` and `agent` (host < cluster < agent): the
/// session store of `agent` writes through it, it reads only the host's
/// loaded plugins.
#[test]
fn the_cluster_layer_uses_nothing_above_the_host() {
    for above in ["agent", "serve", "cli", "wheel", "mcp_client"] {
        assert_eq!(
            edge_files("cluster", above),
            Vec::<String>::new(),
            "cluster -> {above}"
        );
    }
}
