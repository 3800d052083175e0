//! The layout of `src/` shows the architecture (issue 20, item 4): no
//! import cycle between its top-level modules, no Python in `core/` and
//! `plugins/`, and no file outside `src/dialects/` naming a dialect's
//! module except the dialect table. Plain Rust reading the sources: an
//! edge is a `crate::<module>` path in code (comments and `#[cfg(test)]`
//! modules left out).
//!
//! Sizes that stay small (issue 46, item 5): no file over
//! [`MAX_FILE_LINES`] lines, no function over [`MAX_FN_LINES`], no circle
//! of files inside `core/` (an edge is a core file naming another by
//! `crate::core::…`, `super::…`, `self::…` or a child module's name), and
//! no dialect named in `core/`'s code.

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
    /// The code without comments and `#[cfg(test)]` modules (a comment's
    /// line breaks are kept, so code keeps its line numbers up to the
    /// first test module).
    code: String,
    /// Lines of the whole file, comments and tests included.
    lines: usize,
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
                lines: text.lines().count(),
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
            out.extend(text[i..end].chars().filter(|&c| c == '\n'));
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

/// The longest a file under `src/` may be, in lines (comments and tests
/// included).
const MAX_FILE_LINES: usize = 700;

/// The longest a function under `src/` may be, in lines from its `fn` to
/// its closing brace (outside `#[cfg(test)]` modules).
const MAX_FN_LINES: usize = 120;

/// The names of the plugin APIs plughost speaks; none is spelled in the
/// core's code (its comments may explain a contract with them).
const DIALECT_NAMES: [&str; 6] = [
    "flowly",
    "hermes",
    "felix",
    "codumentor",
    "claude",
    "bundle",
];

/// The files of `sources` longer than [`MAX_FILE_LINES`]: `file (lines)`.
fn long_files(sources: &[Source]) -> Vec<String> {
    sources
        .iter()
        .filter(|s| s.lines > MAX_FILE_LINES)
        .map(|s| format!("{} ({} lines)", s.rel, s.lines))
        .collect()
}

/// The functions of `sources` longer than [`MAX_FN_LINES`]:
/// `file:line name (lines)`.
fn long_functions(sources: &[Source]) -> Vec<String> {
    let mut found = Vec::new();
    for s in sources {
        for (name, line, lines) in functions(&s.code) {
            if lines > MAX_FN_LINES {
                found.push(format!("{}:{line} {name} ({lines} lines)", s.rel));
            }
        }
    }
    found
}

/// Every function with a body in `code` (comments already removed):
/// its name, the line of its `fn` and its length in lines.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(off) = code[at..].find("fn") {
        let start = at + off;
        at = start + 2;
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[start + 2..];
        if !rest.starts_with(char::is_whitespace) {
            continue; // `fn(…)`, a function pointer type, or a longer word
        }
        let name = ident(rest.trim_start());
        if name.is_empty() {
            continue;
        }
        // The body opens at the first `{` outside brackets; a `;` there
        // first means a declaration without one.
        let mut depth = 0i32;
        let mut open = None;
        let mut i = start + 2;
        while i < bytes.len() {
            match bytes[i] {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    open = Some(i);
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        let Some(open) = open else { continue };
        let Some(close) = matching_brace(code, open) else {
            continue;
        };
        let line = code[..start].matches('\n').count() + 1;
        let lines = code[start..=close].matches('\n').count() + 1;
        found.push((name.to_string(), line, lines));
    }
    found
}

/// The index of the `}` closing the `{` at `open`, string, raw string
/// and character literals skipped.
fn matching_brace(code: &str, open: usize) -> Option<usize> {
    let bytes = code.as_bytes();
    let mut depth = 0usize;
    let mut i = open;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            b'r' if matches!(bytes.get(i + 1), Some(b'"' | b'#'))
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_')) =>
            {
                let hashes = bytes[i + 1..].iter().take_while(|&&b| b == b'#').count();
                if bytes.get(i + 1 + hashes) == Some(&b'"') {
                    let end = format!("\"{}", "#".repeat(hashes));
                    let from = i + 2 + hashes;
                    i = code[from..]
                        .find(&end)
                        .map_or(bytes.len(), |e| from + e + end.len());
                    continue;
                }
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' => {
                // A character literal ('{', '\n', '\''); a lifetime has no
                // closing quote.
                if bytes.get(i + 1) == Some(&b'\\') {
                    i += 2;
                    while i < bytes.len() && bytes[i] != b'\'' {
                        i += 1;
                    }
                } else if let Some(c) = code.get(i + 1..).and_then(|r| r.chars().next()) {
                    if code[i + 1 + c.len_utf8()..].starts_with('\'') {
                        i += 1 + c.len_utf8();
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The module path of a file under `src/` (`core/pipeline/mod.rs` →
/// `core::pipeline`, `core/fire.rs` → `core::fire`).
fn module_of(rel: &str) -> Vec<String> {
    let path = rel.trim_end_matches(".rs");
    let mut segments: Vec<String> = path.split('/').map(str::to_string).collect();
    if segments.last().is_some_and(|s| s == "mod") {
        segments.pop();
    }
    segments
}

/// Every path of `code` with at least one `::`, a `use` group's items
/// each spelled out whole (`a::{b, c::d}` → `a::b`, `a::c::d`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let starts = (c.is_ascii_alphabetic() || c == b'_')
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
            && (i < 2 || &bytes[i - 2..i] != b"::");
        if !starts {
            i += 1;
            continue;
        }
        i = path_at(code, i, Vec::new(), &mut found);
    }
    found
}

/// Read the path starting at `i` (after `prefix`) into `found`; where it ends.
fn path_at(code: &str, mut i: usize, prefix: Vec<String>, found: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        let name = ident(&code[i..]);
        if name.is_empty() {
            break;
        }
        path.push(name.to_string());
        i += name.len();
        if !code[i..].starts_with("::") {
            break;
        }
        i += 2;
        if code[i..].starts_with('{') {
            let Some(close) = matching_brace(code, i) else {
                return code.len();
            };
            let group = &code[i + 1..close];
            let mut item_start = 0;
            let mut depth = 0;
            for (at, ch) in group.char_indices().chain([(group.len(), ',')]) {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let item = &group[item_start..at];
                        let lead = item.len() - item.trim_start().len();
                        if !item.trim().is_empty() {
                            let mut sub = Vec::new();
                            path_at(item, lead, path.clone(), &mut sub);
                            found.extend(sub);
                        }
                        item_start = at + 1;
                    }
                    _ => {}
                }
            }
            return close + 1;
        }
    }
    if path.len() > 1 {
        found.push(path);
    }
    i
}

/// Every edge between files under `src/core/` (`from file → to file`),
/// resolved as the compiler would: `crate::core::…`, `super::…`,
/// `self::…`, or a path starting with a child module's name; a path names
/// the file of its longest prefix that is a module.
fn core_file_edges(sources: &[Source]) -> BTreeMap<(String, String), BTreeSet<String>> {
    let core: Vec<&Source> = sources
        .iter()
        .filter(|s| s.rel.starts_with("core/"))
        .collect();
    let files: BTreeMap<Vec<String>, String> = core
        .iter()
        .map(|s| (module_of(&s.rel), s.rel.clone()))
        .collect();
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for s in &core {
        let here = module_of(&s.rel);
        for path in paths(&s.code) {
            let mut absolute: Vec<String> = match path[0].as_str() {
                "crate" => path[1..].to_vec(),
                "self" => here.iter().chain(&path[1..]).cloned().collect(),
                "super" => {
                    let ups = path.iter().take_while(|p| *p == "super").count();
                    if ups > here.len() {
                        continue;
                    }
                    let base = &here[..here.len() - ups];
                    base.iter().chain(&path[ups..]).cloned().collect()
                }
                _ => here.iter().chain(&path).cloned().collect(),
            };
            while !absolute.is_empty() && !files.contains_key(&absolute) {
                absolute.pop();
            }
            let Some(to) = files.get(&absolute) else {
                continue;
            };
            // A relative path names a child only: its longest module
            // prefix must go deeper than this file's own module.
            let relative = !matches!(path[0].as_str(), "crate" | "self" | "super");
            if *to == s.rel || (relative && absolute.len() <= here.len()) {
                continue;
            }
            edges
                .entry((s.rel.clone(), to.clone()))
                .or_default()
                .insert(s.rel.clone());
        }
    }
    edges
}

/// The files of `sources` under `src/core/` whose code spells a dialect's
/// name: `file: name`.
fn core_naming_dialects(sources: &[Source]) -> Vec<String> {
    let mut found = Vec::new();
    for s in sources.iter().filter(|s| s.rel.starts_with("core/")) {
        let code = s.code.to_lowercase();
        for name in DIALECT_NAMES {
            if code.contains(name) {
                found.push(format!("{}: {name}", s.rel));
            }
        }
    }
    found
}

fn source(rel: &str, text: &str) -> Source {
    Source {
        rel: rel.to_string(),
        code: without_tests(&without_comments(text)),
        lines: text.lines().count(),
    }
}

#[test]
fn the_size_checks_see_long_files_and_functions() {
    let body = |n: usize| "    x();\n".repeat(n);
    // 118 body lines: 120 with the `fn` line and the closing brace; one
    // more in `long`.
    let text = format!(
        "/* a {{ comment\n */\nfn ok() {{\n{}}}\nfn long(a: [u8; 2]) -> Result<(), ()> {{\n    let s = \"}}\"; let c = '{{'; let r = r#\"}}\"#;\n{}}}\ntrait T {{ fn declared(&self); }}\ntype F = fn(u8) -> u8;\n",
        body(118),
        body(118)
    );
    let s = source("x.rs", &text);
    let fns = functions(&s.code);
    let names: Vec<(&str, usize, usize)> = fns
        .iter()
        .map(|(n, at, len)| (n.as_str(), *at, *len))
        .collect();
    assert_eq!(names, [("ok", 3, 120), ("long", 123, 121)]);
    assert_eq!(long_functions(&[s]), ["x.rs:123 long (121 lines)"]);
    let files = [
        source("a.rs", &"\n".repeat(700)),
        source("b.rs", &"\n".repeat(701)),
    ];
    assert_eq!(long_files(&files), ["b.rs (701 lines)"]);
}

#[test]
fn the_core_reader_sees_file_circles() {
    let sources = [
        source("core/mod.rs", "pub mod a;\npub mod b;\npub mod p;\n"),
        source("core/a.rs", "use crate::core::{b::X, p::q};\n"),
        source(
            "core/b.rs",
            "// crate::core::c\nfn f() { super::a::g(); }\n",
        ),
        source("core/p/mod.rs", "mod q;\nfn f() { q::h(); Self::x(); }\n"),
        source(
            "core/p/q.rs",
            "use super::{Item, super::b};\n#[cfg(test)]\nmod tests { use crate::core::a; }\n",
        ),
        source(
            "core/c.rs",
            "use self::inner::Z;\nfn g() -> E { E::Lane }\n",
        ),
    ];
    let edges: Vec<(String, String)> = core_file_edges(&sources).into_keys().collect();
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        edges,
        [
            pair("core/a.rs", "core/b.rs"),
            pair("core/a.rs", "core/p/q.rs"),
            pair("core/b.rs", "core/a.rs"),
            pair("core/p/mod.rs", "core/p/q.rs"),
            pair("core/p/q.rs", "core/b.rs"),
            pair("core/p/q.rs", "core/p/mod.rs"),
        ]
    );
    assert_eq!(
        cycles(&core_file_edges(&sources)),
        vec![vec![
            "core/a.rs",
            "core/b.rs",
            "core/p/mod.rs",
            "core/p/q.rs"
        ]]
    );
}

#[test]
fn the_dialect_check_reads_code_not_comments() {
    let sources = [
        source(
            "core/a.rs",
            "// Felix's cron, explained\nconst EVERY: u64 = 60;\n",
        ),
        source(
            "core/b.rs",
            "pub const FELIX_CRON_EVERY: u64 = 60;\nconst S: &str = \"Hermes's\";\n",
        ),
        source("dialects/felix/cron.rs", "const FELIX: u8 = 1;\n"),
    ];
    assert_eq!(
        core_naming_dialects(&sources),
        ["core/b.rs: hermes", "core/b.rs: felix"]
    );
}

#[test]
fn no_file_is_over_700_lines() {
    assert_eq!(long_files(&sources()), Vec::<String>::new());
}

#[test]
fn no_function_is_over_120_lines() {
    assert_eq!(long_functions(&sources()), Vec::<String>::new());
}

#[test]
fn no_file_circle_inside_the_core() {
    assert_eq!(
        cycles(&core_file_edges(&sources())),
        Vec::<Vec<String>>::new()
    );
}

#[test]
fn no_dialect_is_named_in_the_core() {
    assert_eq!(core_naming_dialects(&sources()), Vec::<String>::new());
}

/// A small dialect contract (issue 46, item 2): `Dialect` has at most 12
/// methods; what only some dialects can do is an ability trait of its own
/// (`src/dialects/abilities/`).
#[test]
fn the_dialect_trait_has_at_most_twelve_methods() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/dialects/mod.rs"))
            .unwrap();
    let body = text
        .split_once("pub trait Dialect")
        .and_then(|(_, rest)| rest.split_once("\n}\n"))
        .map(|(body, _)| without_comments(body))
        .expect("src/dialects/mod.rs declares `pub trait Dialect`");
    let methods: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("    fn ") || l.starts_with("    async fn "))
        .collect();
    assert!(
        methods.len() <= 12,
        "{} methods: {methods:#?}",
        methods.len()
    );
}

/// Every event name a plugin API gives its plugins, as the dialects'
/// tables hold them: their rows, their own lanes, and the names their
/// references know.
fn plugin_api_event_names() -> BTreeSet<&'static str> {
    let mut names = BTreeSet::new();
    for dialect in plughost::dialects::DIALECTS {
        names.extend(dialect.events().iter().map(|row| row.name));
        names.extend(dialect.lanes().iter().map(|lane| lane.name));
        if let Some(own) = dialect.reference().and_then(|doc| doc.own_events) {
            names.extend(own.known.iter().copied());
        }
    }
    // A dialect may spell an event as the core names its lane.
    use plughost::core::hooks::HookEvent;
    for lane in HookEvent::ALL.iter().chain(HookEvent::LOOP_POINTS.iter()) {
        names.remove(lane.name());
    }
    names
}

/// `name` as a whole word of `text` (not inside a longer identifier).
fn spells(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

/// One event vocabulary (issue 46, item 1): the core's is its lanes and
/// points; no plugin API's event name is spelled in `core/`, comments
/// included — a dialect's rows map its names onto the core's lanes.
#[test]
fn no_plugin_api_event_name_is_spelled_in_the_core() {
    let names = plugin_api_event_names();
    assert!(names.contains("pre_tool_call"), "{names:?}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let mut files = Vec::new();
    walk(&root, &mut files);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for name in &names {
            if spells(&text, name) {
                found.push(format!("{}: {name}", file.display()));
            }
        }
    }
    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn the_vocabulary_check_sees_whole_words_only() {
    assert!(spells("fires `pre_tool_call` first", "pre_tool_call"));
    assert!(!spells("fn pre_tool_call_refused()", "pre_tool_call"));
    assert!(!spells("my_pre_tool_call", "pre_tool_call"));
}
