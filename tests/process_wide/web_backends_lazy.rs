//! The bundled web backends register at start-up without importing their
//! modules; the first question about one imports its module, and only its.
//! A process of its own (`alone!`): `sys.modules` is the process's, and
//! another test's web search imports the backends.

use plughost::Host;
use serde_json::json;

/// A home with one enabled plugin, `filtered`, whose `__init__.py` is `init`.
fn home_with(init: &str) -> tempfile::TempDir {
    let home = crate::common::home_with(&["filtered"]);
    crate::common::write_plugin(
        &home.path().join("plugins"),
        "filtered",
        "name: filtered\n",
        &[("__init__.py", init)],
    );
    home
}

const PROBE: &str = r#"
import json, sys

PREFIX = "flowly.agent.tools.web_providers."
BACKENDS = ("brave", "ddgs", "exa", "firecrawl", "local", "parallel", "searxng", "tavily")

def _imported():
    return sorted(m[len(PREFIX):] for m in sys.modules if m.startswith(PREFIX) and m[len(PREFIX):] in BACKENDS)

def _use(name):
    from flowly.agent.tools.web_providers.registry import get_provider
    p = get_provider(name)
    return json.dumps({"available": p.is_available(), "search": p.supports_search(), "display": p.display_name, "imported": _imported()})

def register(ctx):
    ctx.register_tool("imported", {"type": "object", "properties": {}}, lambda: json.dumps(_imported()))
    ctx.register_tool("providers", {"type": "object", "properties": {}}, lambda: json.dumps(sorted(
        p.name for p in __import__("flowly.agent.tools.web_providers.registry", fromlist=["x"]).list_providers())))
    ctx.register_tool("use", {"type": "object", "properties": {"name": {"type": "string"}}}, _use)
"#;

/// The bundled web backends register at start-up without importing their
/// modules (issue 26 item 3: a backend's code when a search needs it); the
/// first question about one imports its module, and only its.
#[test]
fn the_bundled_web_backends_import_their_modules_when_first_used() {
    crate::alone!(the_bundled_web_backends_import_their_modules_when_first_used);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(plughost::runtime::thread_started)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(used_first());
}

async fn used_first() {
    let home = home_with(PROBE);
    let host = Host::builder().home(home.path()).build().unwrap();
    let text = |r: plughost::core::dispatch::ToolResult| r.text;
    assert_eq!(text(host.call_tool("imported", json!({}), "s").await), "[]");
    let providers = text(host.call_tool("providers", json!({}), "s").await);
    for name in [
        "brave",
        "ddgs",
        "exa",
        "firecrawl",
        "local",
        "parallel",
        "searxng",
        "tavily",
    ] {
        assert!(providers.contains(&format!("\"{name}\"")), "{providers}");
    }
    let used: serde_json::Value = serde_json::from_str(&text(
        host.call_tool("use", json!({"name": "searxng"}), "s").await,
    ))
    .unwrap();
    assert_eq!(used["display"], "SearXNG");
    assert_eq!(used["search"], true);
    assert_eq!(used["imported"], json!(["searxng"]));
}
