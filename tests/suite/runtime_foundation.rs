//! The runtime foundation from the Rust API: typed outcomes with
//! tracebacks, a plugin's `SystemExit` contained, hooks' wrong-shape
//! answers counted, hosts with their own homes, the CLI's exit code decided
//! on the outcome (never the text).

use std::process::Command;

use crate::common::{home_with, no_bundled, write_plugin};
use plughost::core::hooks::{HookEvent, HOOK_SPECS};
use plughost::{Host, ToolOutcome};
use serde_json::json;

const PLUGIN: &str = r#"
import asyncio
from flowly.profile import get_flowly_home

def register(ctx):
    def boom():
        return 1 / 0

    async def exit_after_await(code: int = 3):
        await asyncio.sleep(0)
        raise SystemExit(code)

    async def anap():
        await asyncio.sleep(0.01)
        return "napped"

    ctx.register_tool("boom", {}, boom)
    ctx.register_tool("exit_after_await", {"type": "object", "properties": {"code": {"type": "integer"}}}, exit_after_await)
    ctx.register_tool("anap", {}, anap)
    ctx.register_tool("errors_found", {}, lambda: "Errors found: 0")
    ctx.register_tool("home", {}, lambda: str(get_flowly_home()))
    ctx.register_hook("pre_tool_call", lambda c: "not a BlockAction")
    ctx.register_hook("post_tool_call", lambda c: None)
"#;

fn host_in(home: &std::path::Path, bundled: &std::path::Path) -> Host {
    write_plugin(
        &home.join("plugins"),
        "faults",
        "name: faults\n",
        &[("__init__.py", PLUGIN)],
    );
    Host::builder()
        .home(home)
        .bundled_dir(bundled)
        .build()
        .unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(plughost::runtime::thread_started)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_raising_handler_gives_a_typed_outcome_with_its_traceback() {
    let (home, bundled) = (home_with(&["faults"]), no_bundled());
    let host = host_in(home.path(), bundled.path());
    let result = rt().block_on(host.call_tool("boom", json!({}), "s"));
    assert_eq!(result.text, "Error executing boom: division by zero");
    let ToolOutcome::Raised { error } = &result.outcome else {
        panic!("{:?}", result.outcome)
    };
    assert_eq!(error.kind, "ZeroDivisionError");
    assert_eq!(error.message, "division by zero");
    let init = home.path().join("plugins/faults/__init__.py");
    assert_eq!(
        error.location.as_deref(),
        Some(format!("{}:7", init.display()).as_str())
    );
    assert!(error
        .traceback
        .as_deref()
        .unwrap()
        .contains("ZeroDivisionError"));
}

#[test]
fn system_exit_after_a_suspension_fails_only_that_call() {
    let (home, bundled) = (home_with(&["faults"]), no_bundled());
    let host = host_in(home.path(), bundled.path());
    let rt = rt();
    let exited = rt.block_on(host.call_tool("exit_after_await", json!({"code": 3}), "s"));
    assert_eq!(
        exited.text,
        "Error executing exit_after_await: SystemExit: 3"
    );
    let ToolOutcome::Raised { error } = &exited.outcome else {
        panic!("{:?}", exited.outcome)
    };
    assert!(error.base_exception);
    // The runtime's asyncio loop still serves calls that suspend.
    for _ in 0..3 {
        assert_eq!(
            rt.block_on(host.call_tool("anap", json!({}), "s")).text,
            "napped"
        );
    }
}

#[test]
fn output_that_starts_with_error_is_a_success() {
    let (home, bundled) = (home_with(&["faults"]), no_bundled());
    let host = host_in(home.path(), bundled.path());
    let result = rt().block_on(host.call_tool("errors_found", json!({}), "s"));
    assert_eq!(result.text, "Errors found: 0");
    assert_eq!(result.outcome, ToolOutcome::Ok);

    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["tools", "call", "errors_found"])
        .env("PLUGHOST_HOME", home.path())
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Errors found: 0\n");
    assert_eq!(out.status.code(), Some(0), "exit code from the outcome");
}

#[test]
fn a_hook_answer_of_the_wrong_shape_is_counted_and_doctor_shows_it() {
    let (home, bundled) = (home_with(&["faults"]), no_bundled());
    let host = host_in(home.path(), bundled.path());
    let rt = rt();
    for _ in 0..2 {
        assert_eq!(
            rt.block_on(host.call_tool("errors_found", json!({}), "s"))
                .text,
            "Errors found: 0",
            "a wrong-shape answer is ignored, as Flowly ignores it"
        );
    }
    let pinned_registry = host.registry();
    let pre = &pinned_registry.hooks().entries(HookEvent::ToolGuard)[0];
    assert_eq!(pre.stats.wrong_shape(), 2);
    assert_eq!(pre.stats.errors(), 2);
    let pinned_registry = host.registry();
    let post = &pinned_registry.hooks().entries(HookEvent::ToolDone)[0];
    assert_eq!(post.stats.errors(), 0);

    let report = plughost::host::doctor::Report::new(&host);
    let faults = report.plugins.iter().find(|p| p.key == "faults").unwrap();
    assert_eq!(faults.hook_problems.len(), 1);
    assert_eq!(faults.hook_problems[0].event, "pre_tool_call");
    assert_eq!(faults.hook_problems[0].wrong_shape, 2);
    let text = report.text();
    assert!(
        text.contains("hook pre_tool_call register.<locals>.<lambda>: 2 of 2 answers not used (0 raised, 2 wrong shape, 0 timed out)"),
        "{text}"
    );
}

#[test]
fn two_hosts_in_one_process_keep_their_own_homes() {
    let (one, two, bundled) = (home_with(&["faults"]), home_with(&["faults"]), no_bundled());
    let first = host_in(one.path(), bundled.path());
    let second = host_in(two.path(), bundled.path());
    let rt = rt();
    assert_eq!(
        rt.block_on(first.call_tool("home", json!({}), "s")).text,
        one.path().display().to_string()
    );
    assert_eq!(
        rt.block_on(second.call_tool("home", json!({}), "s")).text,
        two.path().display().to_string()
    );
}

#[test]
fn a_plugin_that_fails_to_import_keeps_its_traceback_and_location() {
    let (home, bundled) = (home_with(&["broken"]), no_bundled());
    let dir = write_plugin(
        &home.path().join("plugins"),
        "broken",
        "name: broken\n",
        &[(
            "__init__.py",
            "import os\n\nvalue = missing_name\n\ndef register(ctx):\n    pass\n",
        )],
    );
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    let pinned_plugins = host.plugins();
    let record = pinned_plugins.iter().find(|p| p.key == "broken").unwrap();
    assert_eq!(
        record.error.as_deref(),
        Some("NameError: name 'missing_name' is not defined")
    );
    let failure = record.failure.as_ref().unwrap();
    assert_eq!(
        failure.location.as_deref(),
        Some(format!("{}:3", dir.join("__init__.py").display()).as_str())
    );
    assert!(failure.traceback.as_deref().unwrap().contains("Traceback"));
}

#[test]
fn the_hook_table_has_a_row_per_event_in_order() {
    for (spec, event) in HOOK_SPECS.iter().zip(HookEvent::ALL) {
        assert_eq!(spec.event, event);
        assert_eq!(event.spec().event, event);
    }
}

// The runtime a process holds (issue 46 item 3). This binary is one
// process whose tests share its runtime: these ask for the settings it runs
// with (the defaults, unless another test started it otherwise), and a
// mismatch must be refused without changing anything.

/// Asking again for the running runtime's settings returns that runtime;
/// its clones, the hosts built without a runtime, and `Runtime::none()`
/// all run on its one tokio runtime.
#[test]
fn the_same_settings_return_the_running_runtime() {
    use plughost::runtime::Runtime;
    let running = Runtime::current();
    let settings = running
        .settings()
        .expect("the process's runtime runs Python");
    let again = Runtime::start(settings).unwrap();
    assert_eq!(again, running);
    let clone = again.clone();
    assert_eq!(clone, running);
    assert_eq!(
        clone.tokio().handle().id(),
        running.tokio().handle().id(),
        "one tokio runtime for every clone"
    );
    assert_eq!(
        Runtime::none().tokio().handle().id(),
        running.tokio().handle().id()
    );
    assert_eq!(
        Runtime::with_log_level(settings.log_level()).unwrap(),
        running
    );

    let (home, bundled) = (home_with(&[]), no_bundled());
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    assert_eq!(
        host.runtime(),
        running,
        "a host without a runtime uses the process's"
    );
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .runtime(&clone)
        .python_log_level(settings.log_level())
        .build()
        .unwrap();
    assert_eq!(host.runtime(), running);
}

/// Other settings are refused with an error naming both, and the running
/// runtime is left as it was: by `Runtime::start`, and by a host asking for
/// another Python log level (with or without a runtime of its own).
#[test]
fn other_settings_are_an_error_naming_both() {
    use plughost::runtime::{Runtime, RuntimeError};
    let running = Runtime::current();
    let settings = running.settings().unwrap();
    let level = if settings.log_level() == 10 { 20 } else { 10 };
    let other = settings.python_log_level(level);

    let refused = Runtime::start(other).unwrap_err();
    assert_eq!(
        refused,
        RuntimeError::Mismatch {
            running: settings,
            asked: other
        }
    );
    let text = refused.to_string();
    assert!(text.contains(&settings.to_string()), "{text}");
    assert!(text.contains(&other.to_string()), "{text}");
    assert!(
        text.contains(&format!(
            "python_log_level {level} asked, {} running",
            settings.log_level()
        )),
        "{text}"
    );
    let threads = settings.worker_threads(settings.threads().unwrap_or(1) + 3);
    assert!(matches!(
        Runtime::start(threads),
        Err(RuntimeError::Mismatch { asked, .. }) if asked == threads
    ));
    assert!(Runtime::with_log_level(level).is_err());

    let (home, bundled) = (home_with(&[]), no_bundled());
    for explicit in [None, Some(&running)] {
        let mut builder = Host::builder()
            .home(home.path())
            .bundled_dir(bundled.path())
            .python_log_level(level);
        if let Some(rt) = explicit {
            builder = builder.runtime(rt);
        }
        match builder.build() {
            Err(plughost::host::HostError::Runtime(RuntimeError::Mismatch {
                running: was,
                asked,
            })) => {
                assert_eq!(was, settings);
                assert_eq!(asked, other);
            }
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("a host asking for Python logging at {level} was built"),
        }
    }

    // Nothing changed.
    assert_eq!(Runtime::current(), running);
    assert_eq!(Runtime::current().settings(), Some(settings));
    assert_eq!(Runtime::start(settings).unwrap(), running);
}
