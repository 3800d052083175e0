//! Hostile values never crash plughost: cyclic and over-deep schemas and
//! arguments are refused with a clear error, at registration or call, from
//! the Rust API and the CLI; arbitrary arguments to a validated tool end in
//! a typed outcome (property test). Also: a `pre_tool_call` hook's in-place
//! edit of `ctx.params` reaches native tools, and a handler returning a
//! non-coroutine awaitable works.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{home_with, no_bundled, write_plugin};
use plughost::{Host, Tool, ToolOutcome};
use proptest::prelude::*;
use serde_json::{json, Value};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `{"type": "object", "properties": {"a": …}}` nested `levels` deep.
fn deep_schema(levels: usize) -> Value {
    // Built by moving, not with `json!` (which would serialise, recursively,
    // what it interpolates).
    let mut schema = json!({"type": "string"});
    for _ in 0..levels {
        let mut properties = serde_json::Map::new();
        properties.insert("a".into(), schema);
        let mut object = serde_json::Map::new();
        object.insert("type".into(), json!("object"));
        object.insert("properties".into(), Value::Object(properties));
        schema = Value::Object(object);
    }
    schema
}

#[test]
fn an_over_deep_native_schema_refuses_calls_instead_of_overflowing_the_stack() {
    let started = Instant::now();
    let (home, bundled) = (home_with(&[]), no_bundled());
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .tool(Tool::from_fn("deep", "", deep_schema(5_000), |_| {
            Ok("ran".into())
        }))
        .tool(Tool::from_fn("fine", "", deep_schema(3), |_| {
            Ok("ran".into())
        }))
        .build()
        .unwrap();
    let result = rt().block_on(host.call_tool("deep", json!({}), "s"));
    assert!(
        result
            .text
            .starts_with("Error: invalid arguments for deep: the tool's parameter schema nests"),
        "{}",
        result.text
    );
    assert_eq!(result.outcome.kind(), "invalid_arguments");
    assert_eq!(
        rt().block_on(host.call_tool("fine", json!({}), "s")).text,
        "ran"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn cyclic_and_deep_schemas_from_python_fail_the_plugin_at_registration() {
    let (home, bundled) = (home_with(&["cyclic", "deep"]), no_bundled());
    write_plugin(
        &home.path().join("plugins"),
        "cyclic",
        "name: cyclic\n",
        &[(
            "__init__.py",
            "def register(ctx):\n    schema = {'type': 'object'}\n    schema['properties'] = {'a': schema}\n    ctx.register_tool('loop', schema, lambda **kw: 'x')\n",
        )],
    );
    write_plugin(
        &home.path().join("plugins"),
        "deep",
        "name: deep\n",
        &[(
            "__init__.py",
            "import functools\n\ndef register(ctx):\n    schema = functools.reduce(lambda s, _: {'type': 'object', 'properties': {'a': s}}, range(10000), {})\n    ctx.register_tool('deep', schema, lambda **kw: 'x')\n",
        )],
    );
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    for key in ["cyclic", "deep"] {
        let pinned_plugins = host.plugins();
        let record = pinned_plugins.iter().find(|p| p.key == key).unwrap();
        let error = record.error.as_deref().unwrap_or_default();
        assert!(
            error.starts_with("ValueError: register_tool(")
                && error.contains("nests deeper than 128 levels"),
            "{key}: {error}"
        );
    }

    // The CLI's doctor survives the same plugins.
    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["plugins", "doctor"])
        .env("PLUGHOST_HOME", home.path())
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "failed plugins, not a crash");
    assert!(String::from_utf8_lossy(&out.stdout).contains("nests deeper than 128 levels"));
}

#[test]
fn over_deep_cli_arguments_are_bad_input() {
    let (home, bundled) = (home_with(&[]), no_bundled());
    let deep = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
    let args = format!("{{\"a\": {deep}}}");
    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["tools", "call", "anything", "--args", &args])
        .env("PLUGHOST_HOME", home.path())
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--args is not valid JSON"));
}

#[test]
fn a_pre_tool_call_edit_of_params_reaches_a_native_tool() {
    let (home, bundled) = (home_with(&["editor"]), no_bundled());
    write_plugin(
        &home.path().join("plugins"),
        "editor",
        "name: editor\n",
        &[(
            "__init__.py",
            "def register(ctx):\n    def edit(c):\n        if c.tool_name == 'echo':\n            c.params['text'] = c.params['text'].upper()\n    ctx.register_hook('pre_tool_call', edit)\n",
        )],
    );
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .tool(Tool::from_fn(
            "echo",
            "",
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            |a| Ok(a["text"].as_str().unwrap_or_default().to_string()),
        ))
        .build()
        .unwrap();
    assert_eq!(
        rt().block_on(host.call_tool("echo", json!({"text": "quiet"}), "s"))
            .text,
        "QUIET"
    );
}

#[test]
fn a_handler_returning_a_non_coroutine_awaitable_is_awaited() {
    let (home, bundled) = (home_with(&["awaits"]), no_bundled());
    write_plugin(
        &home.path().join("plugins"),
        "awaits",
        "name: awaits\n",
        &[(
            "__init__.py",
            "class Ready:\n    def __await__(self):\n        if False:\n            yield\n        return 'awaited'\n\ndef register(ctx):\n    ctx.register_tool('custom', {}, lambda: Ready())\n",
        )],
    );
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let result = rt().block_on(host.call_tool("custom", json!({}), "s"));
    assert_eq!(
        (result.text.as_str(), result.outcome),
        ("awaited", ToolOutcome::Ok)
    );
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever arguments arrive, a validated native tool's call ends in a
    /// typed outcome: it runs, or the arguments are refused.
    #[test]
    fn arbitrary_arguments_end_in_a_typed_outcome(args in json_value()) {
        let (home, bundled) = (home_with(&[]), no_bundled());
        let host = Host::builder()
            .bundled_dir(bundled.path())
            .home(home.path())
            .tool(Tool::from_fn(
                "typed",
                "",
                json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}, "s": {"type": "string"}}, "required": ["n"], "additionalProperties": false}),
                |a| Ok(format!("n={}", a["n"])),
            ))
            .build()
            .unwrap();
        let result = rt().block_on(host.call_tool("typed", args.clone(), "s"));
        let valid = args.as_object().is_some_and(|m| {
            m.get("n")
                .and_then(Value::as_f64)
                .is_some_and(|n| n >= 0.0 && n.fract() == 0.0)
                && m.keys().all(|k| k == "n" || k == "s")
                && m.get("s").is_none_or(Value::is_string)
        });
        if valid {
            prop_assert_eq!(result.outcome, ToolOutcome::Ok);
        } else {
            prop_assert_eq!(result.outcome.kind(), "invalid_arguments");
        }
    }
}
