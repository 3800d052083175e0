//! Real Flowly's plugin surface: `register_tool`'s extra keywords,
//! `ctx.manifest`, `kind: backend` plugins, `register_web_search_provider`
//! and the compat `flowly.agent.tools.web_providers` providers, each
//! against a loopback server answering like the real service.

use std::path::Path;

use crate::common::{home_with, no_bundled, write_plugin};
use plughost::host::doctor::Report;
use plughost::Host;
use serde_json::{json, Value};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn build(home: &Path, bundled: &Path) -> Host {
    crate::common::builder()
        .home(home)
        .bundled_dir(bundled)
        .build()
        .unwrap()
}

fn call(host: &Host, tool: &str, args: Value) -> plughost::core::dispatch::ToolResult {
    rt().block_on(host.call_tool(tool, args, "s"))
}

const EXTRAS_MANIFEST: &str = r#"
name: extras
version: 2.1.0
description: Uses every keyword
author: someone@example.com
kind: standalone
requires_env:
  - PLUGHOST_PARITY_MANIFEST_VAR
  - name: PLUGHOST_PARITY_DESCRIBED
    description: a described one
provides_tools: [gated, open]
provides_hooks: [pre_tool_call]
"#;

const EXTRAS_PLUGIN: &str = r#"
import json
from flowly.plugins import PluginContext

def register(ctx):
    m = ctx.manifest
    assert ctx.manifest is m
    seen = {
        "type": type(m).__name__, "name": m.name, "version": m.version, "description": m.description,
        "author": m.author, "kind": m.kind, "manifest_version": m.manifest_version,
        "requires_env": m.requires_env, "provides_tools": m.provides_tools,
        "provides_hooks": m.provides_hooks, "provides_web_providers": m.provides_web_providers,
        "source": m.source, "path": str(m.path), "key": m.key,
    }
    ctx.register_tool(name="gated", schema={"type": "object", "properties": {}}, handler=lambda: "ran",
                      check_fn=None, description="needs a variable", toolset="web",
                      requires_env=["PLUGHOST_PARITY_SURELY_UNSET_VAR"], is_async=True, emoji="🔍")
    async def manifest_seen():
        return json.dumps(seen)
    ctx.register_tool(name="open", schema={}, handler=manifest_seen, toolset="meta",
                      requires_env=["PATH"], is_async=True, emoji="")
"#;

#[test]
fn register_tool_takes_flowlys_keywords_and_ctx_manifest_has_flowlys_names() {
    let home = home_with(&["extras"]);
    let dir = write_plugin(
        &home.path().join("plugins"),
        "extras",
        EXTRAS_MANIFEST,
        &[("__init__.py", EXTRAS_PLUGIN)],
    );
    let bundled = no_bundled();
    let host = build(home.path(), bundled.path());
    let record = &host.plugins()[0];
    assert!(record.loaded, "{:?}", record.error);

    let pinned_registry = host.registry();
    let gated = pinned_registry.tool("gated").unwrap();
    assert_eq!(gated.spec.toolset, "web");
    let listed = serde_json::to_value(&gated.spec).unwrap();
    assert_eq!(listed["toolset"], "web", "tools list --json shows it");
    // A toolset Flowly does not know joins `extensions`, as Flowly's
    // test_unknown_plugin_toolset_fails_closed_to_extensions asserts.
    let pinned_registry = host.registry();
    let open = pinned_registry.tool("open").unwrap();
    assert_eq!(open.spec.toolset, "extensions");

    // requires_env is Flowly's to store and ignore (issue 21 item 6):
    // the variable is unset and the tool still runs.
    assert!(gated.spec.requires_env.is_empty());
    assert!(gated.handler.check().is_none());
    let r = call(&host, "gated", json!({}));
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.text, "ran");

    // Set (PATH): runs; ctx.manifest carried Flowly's attributes.
    let r = call(&host, "open", json!({}));
    assert!(r.is_ok(), "{r:?}");
    let seen: Value = serde_json::from_str(&r.text).unwrap();
    assert_eq!(seen["type"], "PluginManifest");
    assert_eq!(seen["name"], "extras");
    assert_eq!(seen["version"], "2.1.0");
    assert_eq!(seen["description"], "Uses every keyword");
    assert_eq!(seen["author"], "someone@example.com");
    assert_eq!(seen["kind"], "standalone");
    assert_eq!(seen["manifest_version"], 1);
    assert_eq!(
        seen["requires_env"],
        json!(["PLUGHOST_PARITY_MANIFEST_VAR", {"name": "PLUGHOST_PARITY_DESCRIBED", "description": "a described one"}])
    );
    assert_eq!(seen["provides_tools"], json!(["gated", "open"]));
    assert_eq!(seen["provides_hooks"], json!(["pre_tool_call"]));
    assert_eq!(seen["provides_web_providers"], json!([]));
    assert_eq!(seen["source"], "user");
    assert_eq!(seen["path"], dir.to_string_lossy().as_ref());
    assert_eq!(seen["key"], "extras");

    // Doctor has no tool variable to name: Flowly's tools gate on none.
    let report = Report::new(&host);
    assert!(report.plugins[0].tool_requires_env.is_empty());
    assert!(!report.text().contains("tool gated requires_env"));
}

#[test]
fn bad_extra_keywords_fail_the_plugin_with_a_clear_error() {
    let cases = [
        (
            "requires_env=5",
            "requires_env must be a list of environment variable names, got int",
        ),
        (
            "requires_env=[3]",
            "requires_env must be a list of environment variable names, got int",
        ),
        (
            "requires_env={'A': 1}",
            "requires_env must be a list of environment variable names, got dict",
        ),
        (
            "requires_env=['  ']",
            "requires_env names an empty variable",
        ),
        ("toolset=3", "toolset must be a string, got int"),
    ];
    for (keyword, expected) in cases {
        let home = home_with(&["bad"]);
        let code = format!(
            "def register(ctx):\n    ctx.register_tool(name='t', schema={{}}, handler=lambda: 'x', {keyword})\n"
        );
        write_plugin(
            &home.path().join("plugins"),
            "bad",
            "name: bad\n",
            &[("__init__.py", &code)],
        );
        let bundled = no_bundled();
        let host = build(home.path(), bundled.path());
        let p = &host.plugins()[0];
        assert!(!p.loaded, "{keyword}");
        let error = p.error.clone().unwrap_or_default();
        assert!(error.contains(expected), "{keyword}: {error}");
        assert!(host.registry().tool("t").is_none(), "nothing left behind");
    }
}

const BACKEND_MANIFEST: &str = "name: web-mine\nkind: backend\nprovides_web_providers: [mine]\n";

const BACKEND_PLUGIN: &str = r#"
from flowly.agent.tools.web_providers.base import WebSearchProvider

class Mine(WebSearchProvider):
    @property
    def name(self):
        return "mine"
    def is_available(self):
        return True
    def search(self, query, limit=5):
        return {"success": True, "data": {"web": [{"title": query, "url": "u", "description": "d", "position": 1}]}}

def register(ctx):
    ctx.register_web_search_provider(Mine())
"#;

#[test]
fn backend_plugins_load_bundled_by_default_and_user_ones_when_enabled() {
    // User backend, not enabled: listed, not loaded.
    let home = home_with(&[]);
    write_plugin(
        &home.path().join("plugins"),
        "web-mine",
        BACKEND_MANIFEST,
        &[("__init__.py", BACKEND_PLUGIN)],
    );
    let bundled = no_bundled();
    let host = build(home.path(), bundled.path());
    let p = &host.plugins()[0];
    assert_eq!(p.status.as_str(), "not-enabled", "{p:?}");
    assert_eq!(p.provides_web_providers, ["mine"]);

    // Enabled: loads, and the list shows what it provides.
    let home = home_with(&["web-mine"]);
    write_plugin(
        &home.path().join("plugins"),
        "web-mine",
        BACKEND_MANIFEST,
        &[("__init__.py", BACKEND_PLUGIN)],
    );
    let host = build(home.path(), bundled.path());
    let p = &host.plugins()[0];
    assert!(p.loaded, "{:?}", p.error);
    assert_eq!(p.kind, "backend");
    let listed = serde_json::to_value(p).unwrap();
    assert_eq!(listed["provides_web_providers"], json!(["mine"]));
    assert_eq!(listed["status"], "loaded");

    // Bundled backend: on by default; exclusive is still skipped.
    let home = home_with(&[]);
    let bundled = tempfile::tempdir().unwrap();
    write_plugin(
        bundled.path(),
        "web-mine",
        BACKEND_MANIFEST,
        &[("__init__.py", BACKEND_PLUGIN)],
    );
    write_plugin(
        bundled.path(),
        "excl",
        "name: excl\nkind: exclusive\n",
        &[("__init__.py", "def register(ctx): pass\n")],
    );
    let host = build(home.path(), bundled.path());
    let pinned_plugins = host.plugins();
    let by = |k: &str| pinned_plugins.iter().find(|p| p.key == k).unwrap();
    assert!(by("web-mine").loaded, "{:?}", by("web-mine").error);
    assert_eq!(by("excl").status.as_str(), "skipped");
    assert_eq!(
        by("excl").error.as_deref(),
        Some("kind=exclusive is not supported yet")
    );
}
