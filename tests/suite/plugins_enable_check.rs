//! `plugins enable NAME` loads the plugin (in a child) before it records
//! it: what it registers is said, a plugin that raises or crashes while
//! loading is refused with why and where (its own innermost frame), unless
//! `--force`; `plugins doctor` does not suggest enabling a plugin it knows
//! cannot load; an install summary counts the tools that were registered,
//! not the ones a collision rule turned away (issue 51, item 5).

use std::process::{Command, Output};

use crate::common::{home_with, no_bundled, write_plugin};

fn run(home: &std::path::Path, bundled: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(args)
        .env("PLUGHOST_HOME", home)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env_remove("PLUGHOST_LOG")
        .output()
        .unwrap()
}

fn said(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn enabled(home: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(home.join("config.json")).unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default()["plugins"]["enabled"]
        .clone()
}

/// A Flowly plugin that loads: one tool, one hook.
const GOOD: &str = "def register(ctx):\n    ctx.register_tool('ping', {'type': 'object', 'properties': {}}, lambda: 'pong')\n    ctx.register_hook('pre_tool_call', lambda c: None)\n";

/// A Flowly plugin whose `register` fails inside the standard library
/// (`json.loads` of its own bad settings): `at:` must name the plugin's
/// line, not `json/decoder.py`.
const RAISES: &str = "import json\n\nSETTINGS = '{not json'\n\n\ndef register(ctx):\n    settings = json.loads(SETTINGS)\n    ctx.register_tool('never', {'type': 'object', 'properties': {}}, lambda: settings)\n";

/// A plugin whose `register` segfaults.
const CRASHES: &str = "import ctypes\n\ndef register(ctx):\n    ctypes.string_at(0)\n";

#[test]
fn enable_loads_the_plugin_first_and_says_what_it_registers_or_why_it_fails() {
    let (home, bundled) = (home_with(&[]), no_bundled());
    let plugins = home.path().join("plugins");
    write_plugin(&plugins, "good", "name: good\n", &[("__init__.py", GOOD)]);
    let bad = write_plugin(&plugins, "bad", "name: bad\n", &[("__init__.py", RAISES)]);

    let out = run(home.path(), bundled.path(), &["plugins", "enable", "good"]);
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains("Enabled good (it loads: 1 tool, 1 hook)."),
        "{}",
        said(&out)
    );
    assert_eq!(enabled(home.path()), serde_json::json!(["good"]));

    let out = run(home.path(), bundled.path(), &["plugins", "enable", "bad"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let text = said(&out);
    assert!(text.contains("plugin 'bad' fails to load: "), "{text}");
    assert!(text.contains("JSONDecodeError"), "{text}");
    // The plugin's own innermost frame (line 7, its json.loads), though
    // the exception was raised in the standard library.
    let own = format!("at: {}:7", bad.join("__init__.py").display());
    assert!(text.contains(&own), "wanted '{own}' in:\n{text}");
    assert!(!text.contains("at: /usr/lib"), "{text}");
    assert!(
        text.contains("It was not enabled; fix it, then run: plughost plugins enable bad"),
        "{text}"
    );
    assert_eq!(enabled(home.path()), serde_json::json!(["good"]));

    // --force records it anyway, saying it fails.
    let out = run(
        home.path(),
        bundled.path(),
        &["plugins", "enable", "bad", "--force"],
    );
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains("fails to load") && said(&out).contains("enabled anyway"),
        "{}",
        said(&out)
    );
    assert_eq!(enabled(home.path()), serde_json::json!(["good", "bad"]));
}

#[test]
fn a_plugin_that_crashes_while_loading_is_not_enabled_and_the_command_reports_it() {
    let (home, bundled) = (home_with(&[]), no_bundled());
    write_plugin(
        &home.path().join("plugins"),
        "crasher",
        "name: crasher\n",
        &[("__init__.py", CRASHES)],
    );
    let out = run(
        home.path(),
        bundled.path(),
        &["plugins", "enable", "crasher"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let text = said(&out);
    assert!(
        text.contains(
            "plugin 'crasher' fails to load: it ended the process that loaded it (SIGSEGV"
        ),
        "{text}"
    );
    assert!(text.contains("It was not enabled"), "{text}");
    assert_eq!(enabled(home.path()), serde_json::Value::Array(vec![]));
}

#[test]
fn doctor_does_not_suggest_enabling_a_plugin_whose_manifest_cannot_load() {
    let (home, bundled) = (home_with(&[]), no_bundled());
    let plugins = home.path().join("plugins");
    write_plugin(
        &plugins,
        "dormant",
        "name: dormant\n",
        &[("__init__.py", GOOD)],
    );
    write_plugin(
        &plugins,
        "wrecked",
        "name: [wrecked\nversion: 1\n",
        &[("__init__.py", GOOD)],
    );
    let out = run(home.path(), bundled.path(), &["plugins", "doctor"]);
    let text = said(&out);
    // The sound one is suggested, the broken one is not.
    assert!(
        text.contains("run: plughost plugins enable dormant"),
        "{text}"
    );
    assert!(text.contains("wrecked"), "{text}");
    assert!(!text.contains("plugins enable wrecked"), "{text}");
    assert!(text.contains("fix that first"), "{text}");
}

/// In the style of real Hermes plugins; its second `shout` (another
/// toolset, no `override=True`) is turned away, as Hermes's registry does.
const HERMES_TWICE: &str = "import json\n\nSCHEMA = {'name': 'shout', 'description': 'Shout', 'parameters': {'type': 'object', 'properties': {}}}\n\ndef shout(args, **kwargs):\n    return json.dumps({'shouted': True})\n\ndef register(ctx):\n    ctx.register_tool('shout', 'demo', SCHEMA, shout)\n    ctx.register_tool('shout', 'other', SCHEMA, shout)\n    ctx.register_tool('whisper', 'demo', dict(SCHEMA, name='whisper'), shout)\n";

#[test]
fn an_install_summary_counts_only_the_tools_that_were_registered() {
    let (home, bundled) = (home_with(&[]), no_bundled());
    let src = tempfile::tempdir().unwrap();
    let dir = write_plugin(
        src.path(),
        "twice",
        "name: twice\nversion: 1.0.0\n",
        &[("__init__.py", HERMES_TWICE)],
    );
    let out = run(
        home.path(),
        bundled.path(),
        &[
            "plugins",
            "install",
            "--enable",
            "--dialect",
            "hermes",
            dir.to_str().unwrap(),
        ],
    );
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Enabled twice (it loads: 2 tools)."),
        "{text}"
    );
}

/// A Hermes plugin whose `register` raises (the shape of a public platform
/// plugin that hung `plugins install --enable`: CPython 3.11 deadlocked in
/// `sys._current_frames()` when a collection ran inside it while plughost
/// let the failed plugin's modules go). The install ends, refusing it.
#[test]
fn install_enable_of_a_hermes_plugin_whose_register_raises_ends() {
    let (home, bundled) = (home_with(&[]), no_bundled());
    let hermes = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let dir = write_plugin(
        src.path(),
        "h-d",
        "name: h-d\nversion: 0.1.0\nrequires_hermes: \">=0.1\"\n",
        &[(
            "__init__.py",
            "def register(ctx):\n    raise ValueError(\"boom\")\n",
        )],
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.args(["plugins", "install", "--enable"])
        .arg(&dir)
        .env("PLUGHOST_HOME", home.path())
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("HERMES_HOME", hermes.path())
        .env_remove("PLUGHOST_LOG");
    let out = crate::common::run_bounded(cmd, std::time::Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        said(&out).contains("plugin 'h-d' was installed but fails to load: ValueError: boom"),
        "{}",
        said(&out)
    );
}

/// A plugin whose only contribution is a provider (here a Hermes model
/// provider, as a messaging platform would be) is not "nothing registered".
#[test]
fn enable_counts_a_provider_as_what_the_plugin_registers() {
    let (home, bundled) = (home_with(&[]), no_bundled());
    write_plugin(
        &home.path().join("plugins"),
        "stubcloud",
        "name: stubcloud\nkind: model-provider\nversion: 1.0.0\n",
        &[(
            "__init__.py",
            "from providers import register_provider\nfrom providers.base import ProviderProfile\n\nregister_provider(ProviderProfile(name=\"stubcloud\", env_vars=(\"STUBCLOUD_API_KEY\",), base_url=\"https://api.stubcloud.invalid/v1\", fallback_models=(\"m\",)))\n",
        )],
    );
    let out = run(
        home.path(),
        bundled.path(),
        &["plugins", "enable", "stubcloud"],
    );
    assert!(
        said(&out).contains("Enabled stubcloud (it loads: 1 platform or provider)."),
        "{}",
        said(&out)
    );
}
