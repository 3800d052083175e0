//! A host of native Rust tools, hooks and commands only, built from
//! `Runtime::none()`, never starts CPython: this test binary is its own
//! process, and nothing else in it touches Python, so the interpreter
//! being uninitialised after the host built, ran a tool and fired a hook
//! shows the host did not start it.
use std::sync::{Arc, Mutex};

use plughost::core::hooks::{HookAction, HookEvent, HookPayload};
use plughost::{Host, Runtime, Tool, ToolOutcome};
use serde_json::json;

fn python_started() -> bool {
    // SAFETY: Py_IsInitialized only reads the runtime's state flag; it may
    // be called before (and without) Py_Initialize.
    unsafe { pyo3::ffi::Py_IsInitialized() != 0 }
}

/// One test function, so that its two hosts run in order in this process:
/// the default runtime's host first, while nothing has started Python.
#[test]
fn native_only_hosts_never_start_python() {
    crate::alone!(native_only_hosts_never_start_python);
    assert!(
        !python_started(),
        "nothing in this process starts Python first"
    );
    a_default_host_of_native_parts_starts_no_python();
    a_native_only_host_runs_tools_and_hooks_without_starting_python();
}

fn native_parts(
    builder: plughost::HostBuilder,
    log: Arc<Mutex<Vec<String>>>,
) -> plughost::HostBuilder {
    builder
        .tool(Tool::from_fn(
            "add",
            "Add two numbers",
            json!({"type": "object"}),
            |a| Ok((a["a"].as_i64().unwrap() + a["b"].as_i64().unwrap()).to_string()),
        ))
        .hook(
            HookEvent::ToolGuard,
            move |_e: HookEvent, p: HookPayload<'_>| {
                if let HookPayload::Tool(c) = p {
                    log.lock().unwrap().push(c.tool_name.clone());
                }
                HookAction::Continue
            },
        )
}

/// `Host::builder()` (the default `Runtime::python()`) with an empty home
/// and no bundled plugins: nothing needs Python, so it never starts.
fn a_default_host_of_native_parts_starts_no_python() {
    let home = tempfile::tempdir().unwrap();
    let bundled = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let builder = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path());
    let host = native_parts(builder, seen.clone())
        .command(plughost::core::registry::Command {
            name: "ping".into(),
            description: "Answer pong".into(),
            args_hint: String::new(),
            plugin: "native".into(),
            handler: Arc::new(|_: &str| Some("pong".to_string())),
        })
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(host.call_tool("add", json!({"a": 2, "b": 3}), "s"));
    assert!(matches!(result.outcome, ToolOutcome::Ok), "{result:?}");
    assert_eq!(result.text, "5");
    assert_eq!(*seen.lock().unwrap(), ["add"]);
    let reply = rt.block_on(host.run_command("/ping"));
    assert_eq!(reply.unwrap().as_deref(), Some("pong"));
    assert!(
        !python_started(),
        "a default host of native parts started CPython"
    );
}

fn a_native_only_host_runs_tools_and_hooks_without_starting_python() {
    let home = tempfile::tempdir().unwrap();
    let bundled = tempfile::tempdir().unwrap();
    // A Python plugin in the home: found, and refused without Python.
    let plugin = home.path().join("plugins").join("py");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(plugin.join("plugin.yaml"), "name: py\n").unwrap();
    std::fs::write(plugin.join("__init__.py"), "def register(ctx):\n    pass\n").unwrap();
    std::fs::write(
        home.path().join("config.json"),
        json!({"plugins": {"enabled": ["py"]}}).to_string(),
    )
    .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let host = Host::builder_in(&Runtime::none())
        .home(home.path())
        .bundled_dir(bundled.path())
        .tool(Tool::from_fn(
            "add",
            "Add two numbers",
            json!({"type": "object"}),
            |a| Ok((a["a"].as_i64().unwrap() + a["b"].as_i64().unwrap()).to_string()),
        ))
        .hook(
            HookEvent::ToolGuard,
            move |_e: HookEvent, p: HookPayload<'_>| {
                if let HookPayload::Tool(c) = p {
                    log.lock().unwrap().push(c.tool_name.clone());
                }
                HookAction::Continue
            },
        )
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(host.call_tool("add", json!({"a": 2, "b": 3}), "s"));
    assert!(matches!(result.outcome, ToolOutcome::Ok), "{result:?}");
    assert_eq!(result.text, "5");
    assert_eq!(*seen.lock().unwrap(), ["add"]);
    let pinned_plugins = host.plugins();
    let py = pinned_plugins.iter().find(|p| p.key == "py").unwrap();
    assert!(!py.loaded);
    assert!(
        py.error
            .as_deref()
            .unwrap_or_default()
            .contains("Runtime::none()"),
        "{py:?}"
    );
    assert!(!python_started(), "the native-only host started CPython");
}
