//! The fast paths of issue 26, through real plugins and the real
//! interpreter: a tool hook declaring its tools (`__plughost_tools__`) is
//! called for those only; embedded compat modules are cached as bytecode
//! and read back from it.

use std::process::Command;

use plughost::Host;
use serde_json::json;

const FILTERED: &str = r#"
seen = []

def _guard(ctx):
    seen.append(("pre", ctx.tool_name))

def _after(ctx):
    seen.append(("post", ctx.tool_name))

def _every(ctx):
    seen.append(("every", ctx.tool_name))

_guard.__plughost_tools__ = ("exec", "shell")
_after.__plughost_tools__ = "shell"

def register(ctx):
    ctx.register_hook("pre_tool_call", _guard)
    ctx.register_hook("post_tool_call", _after)
    ctx.register_hook("post_tool_call", _every)
    ctx.register_tool("shell", {"type": "object", "properties": {}}, lambda: "ran")
    ctx.register_tool("greet", {"type": "object", "properties": {}}, lambda: "hi")
    ctx.register_tool("seen", {"type": "object", "properties": {}}, lambda: repr(seen))
"#;

fn home_with(plugin: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("plugins/filtered");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.yaml"), "name: filtered\n").unwrap();
    std::fs::write(dir.join("__init__.py"), plugin).unwrap();
    std::fs::write(
        home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["filtered"]}}"#,
    )
    .unwrap();
    home
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_names_its_tools_is_called_for_those_only() {
    let home = home_with(FILTERED);
    let empty = tempfile::tempdir().unwrap();
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(empty.path())
        .build()
        .unwrap();
    assert_eq!(host.call_tool("greet", json!({}), "s").await.text, "hi");
    assert_eq!(host.call_tool("shell", json!({}), "s").await.text, "ran");
    let seen = host.call_tool("seen", json!({}), "s").await.text;
    // `_every` (no declaration) sees every call, the `seen` call's
    // pre-hook list is read before its own post hooks run.
    assert_eq!(
        seen,
        "[('every', 'greet'), ('pre', 'shell'), ('post', 'shell'), ('every', 'shell')]"
    );
}

/// A Flowly plugin as most are written: it imports its API's types.
const IMPORTS_FLOWLY: &str = r#"
from flowly.agent.hooks import ToolHookContext

def register(ctx):
    ctx.register_tool("ctx_fields", {"type": "object", "properties": {}}, lambda: repr(ToolHookContext(tool_name="t")))
"#;

/// `plughost plugins list`'s output for `home`, with `cache` as the cache
/// directory (the bytecode cache) and `bundled` as the bundled root, as a
/// user runs it (bytecode written).
fn plugins_list(
    home: &std::path::Path,
    cache: &std::path::Path,
    bundled: &std::path::Path,
) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home)
        .args(["plugins", "list"])
        .env("XDG_CACHE_HOME", cache)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env_remove("PYTHONDONTWRITEBYTECODE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn compat_modules_run_only_when_a_plugin_imports_them() {
    let cache = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let list = |home: &std::path::Path| plugins_list(home, cache.path(), empty.path());
    let flowly_cached = || -> Vec<String> {
        std::fs::read_dir(cache.path().join("plughost/bytecode"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .filter(|n| n.starts_with("flowly"))
                    .collect()
            })
            .unwrap_or_default()
    };
    // A Flowly plugin that imports nothing of `flowly`: none of it ran.
    list(home_with(FILTERED).path());
    assert_eq!(flowly_cached(), Vec::<String>::new());
    // One that imports the hooks module: it and its packages ran.
    list(home_with(IMPORTS_FLOWLY).path());
    let mut ran: Vec<String> = flowly_cached()
        .iter()
        .map(|n| n.rsplitn(3, '.').nth(2).unwrap().to_string())
        .collect();
    ran.sort();
    assert_eq!(ran, ["flowly", "flowly.agent", "flowly.agent.hooks"]);
}

#[test]
fn embedded_compat_modules_are_cached_as_bytecode_and_read_back() {
    let home = home_with(IMPORTS_FLOWLY);
    let cache = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let list = || plugins_list(home.path(), cache.path(), empty.path());
    let first = list();
    assert!(first.contains("filtered"), "{first}");
    assert!(first.contains("loaded"), "{first}");
    let dir = cache.path().join("plughost/bytecode");
    let cached: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        cached
            .iter()
            .any(|n| n.starts_with("flowly.agent.hooks.") && n.ends_with(".pyc")),
        "{cached:?}"
    );
    let modified = |name: &str| {
        std::fs::metadata(dir.join(name))
            .unwrap()
            .modified()
            .unwrap()
    };
    let before: Vec<_> = cached.iter().map(|n| modified(n)).collect();
    // Read back, not written again, and the command answers the same.
    assert_eq!(list(), first);
    let after: Vec<_> = cached.iter().map(|n| modified(n)).collect();
    assert_eq!(before, after);
    // A corrupt cache file costs a compile, nothing else.
    for name in &cached {
        std::fs::write(dir.join(name), b"not bytecode").unwrap();
    }
    assert_eq!(list(), first);
}

/// A plugin reporting which of the bundled disk-cleanup's modules are imported.
const DISK_CLEANUP_PROBE: &str = r#"
import json, re, sys

def _imported():
    # `disk_cleanup__2` when another host of this process loaded it first.
    ours = re.compile(r"\.disk_cleanup(__\d+)?\.")
    return sorted(set(m.rsplit(".", 1)[1] for m in sys.modules if ours.search(m)))

def register(ctx):
    ctx.register_tool("dc_imported", {"type": "object", "properties": {}}, lambda: json.dumps(_imported()))
"#;

/// The bundled disk-cleanup registers its hooks without importing the code
/// that snapshots file tools' calls (issue 26 item 3: every `plugins list`
/// and every turn without a file tool paid for it); a tool that is not a
/// file tool, through those hooks, imports none of it either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundled_disk_cleanup_imports_its_snapshot_code_when_a_file_tool_runs() {
    let home = home_with(DISK_CLEANUP_PROBE);
    let host = Host::builder().home(home.path()).build().unwrap();
    let imported = host.call_tool("dc_imported", json!({}), "s").await.text;
    assert_eq!(imported, r#"["toolnames"]"#);
}

const SPECS: &str = r#"
import sys

def _embedded():
    # Every module plughost made from its embedded sources, and whether an
    # `import` of it takes CPython's fast path (`__spec__._initializing` set
    # and false, as the import system leaves what it loads).
    made = {n: m for n, m in list(sys.modules.items()) if n.startswith("_plughost")}
    slow = sorted(n for n, m in made.items() if getattr(getattr(m, "__spec__", None), "_initializing", None) is not False)
    return repr((sorted(made), slow))

def _same_home():
    from flowly.profile import get_flowly_home
    return repr(get_flowly_home() is get_flowly_home())

def register(ctx):
    ctx.register_tool("embedded", {"type": "object", "properties": {}}, _embedded)
    ctx.register_tool("same_home", {"type": "object", "properties": {}}, _same_home)
"#;

/// `import _plughost_runtime` (which the compat code runs inside functions
/// called on every hook) cost a raised and cleared `AttributeError` when the
/// module had no `__spec__._initializing`; and `get_flowly_home()` built a
/// new `Path` at each call (disk-cleanup asks at every session end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_modules_import_on_the_fast_path_and_the_home_path_is_reused() {
    let home = home_with(SPECS);
    let host = Host::builder().home(home.path()).build().unwrap();
    let answer = host.call_tool("embedded", json!({}), "s").await.text;
    assert!(answer.contains("'_plughost_runtime'"), "{answer}");
    assert!(
        answer.ends_with(", [])"),
        "modules off the fast path: {answer}"
    );
    assert_eq!(
        host.call_tool("same_home", json!({}), "s").await.text,
        "True"
    );
}

const GC_PROBE: &str = r#"
import gc, sys

during_load = gc.isenabled()

def register(ctx):
    ctx.register_tool("gc_state", {"type": "object", "properties": {}}, lambda: repr((during_load, gc.isenabled())))
    ctx.register_tool(
        "forgotten",
        {"type": "object", "properties": {}},
        lambda: repr(sorted(n for n in sys.modules if n.startswith("_plughost_plugins.") and n.rsplit(".", 1)[-1].startswith("filtered"))),
    )
"#;

/// Loading plugins holds off Python's cyclic collector (each 700
/// allocations of their imports walked every object again) and turns it
/// back on after; a dropped host's plugin packages leave `sys.modules`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_load_with_the_collector_paused_and_leave_sys_modules_when_dropped() {
    let home = home_with(GC_PROBE);
    let empty = tempfile::tempdir().unwrap();
    let build = || {
        Host::builder()
            .home(home.path())
            .bundled_dir(empty.path())
            .build()
            .unwrap()
    };
    let first = build();
    assert_eq!(
        first.call_tool("gc_state", json!({}), "s").await.text,
        "(False, True)"
    );
    let second = build();
    let both = second.call_tool("forgotten", json!({}), "s").await.text;
    drop(first);
    let after = second.call_tool("forgotten", json!({}), "s").await.text;
    let names = |t: &str| t.matches("filtered").count();
    assert_eq!(names(&both), 2, "{both}");
    assert_eq!(names(&after), 1, "{after}");
    assert!(
        both.contains(after.trim_matches(|c| c == '[' || c == ']')),
        "{both} / {after}"
    );
}
