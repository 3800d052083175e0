//! `plughost plugins install DIR` gives a Hermes plugin the Hermes dialect
//! without `--dialect`, and says why; a Flowly plugin is left as it was.
//! Real plugins on disk in the two shapes that went wrong (positional
//! `register_tool`, `(args, **kwargs)` handlers), through the real binary.

use std::process::{Command, Output};

use crate::common::{home_with, no_bundled};

fn run(home: &std::path::Path, bundled: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(args)
        .env("PLUGHOST_HOME", home)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env_remove("PLUGHOST_LOG")
        .output()
        .unwrap()
}

/// In the style of real Hermes plugins: a manifest with only the fields
/// Flowly shares, the tool in a submodule, registered positionally.
const HERMES_INIT: &str = "from . import tools\n\ndef register(ctx):\n    ctx.register_tool(\"shout\", \"demo\", tools.SCHEMA, tools.shout)\n";
const HERMES_TOOLS: &str = "import json\n\nSCHEMA = {\"name\": \"shout\", \"description\": \"Shout\", \"parameters\": {\"type\": \"object\", \"properties\": {\"text\": {\"type\": \"string\"}}}}\n\ndef shout(args, **kwargs):\n    return json.dumps({\"shouted\": args.get(\"text\", \"\").upper()})\n";

#[test]
fn a_hermes_plugin_installs_as_hermes_and_the_choice_is_said() {
    let (home, bundled) = (home_with(&[]), no_bundled());
    let src = tempfile::tempdir().unwrap();
    let dir = src.path().join("shouter");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.yaml"), "name: shouter\nversion: 1.0.0\n").unwrap();
    std::fs::write(dir.join("__init__.py"), HERMES_INIT).unwrap();
    std::fs::write(dir.join("tools.py"), HERMES_TOOLS).unwrap();
    let out = run(
        home.path(),
        bundled.path(),
        &["plugins", "install", "--enable", dir.to_str().unwrap()],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("Loads as a hermes plugin: __init__.py calls register_tool with four positional arguments"),
        "{said}"
    );
    assert!(said.contains("--dialect NAME"), "{said}");
    assert!(said.contains("Enabled shouter (it loads: 1 tool"), "{said}");
    // It runs the Hermes way: the handler gets the arguments as one dict.
    let out = run(
        home.path(),
        bundled.path(),
        &["tools", "call", "shout", "--args", "{\"text\": \"hi\"}"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\"shouted\": \"HI\""),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_flowly_plugin_installs_as_before_with_the_default_stated() {
    let (home, bundled) = (home_with(&[]), no_bundled());
    let src = tempfile::tempdir().unwrap();
    let dir = src.path().join("greeter");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.yaml"), "name: greeter\nversion: 1.0.0\n").unwrap();
    std::fs::write(
        dir.join("__init__.py"),
        "def register(ctx):\n    def greet(name: str = 'you'):\n        return f'Hello, {name}!'\n    ctx.register_tool('greet', {'type': 'object', 'properties': {'name': {'type': 'string'}}}, greet)\n",
    )
    .unwrap();
    let out = run(
        home.path(),
        bundled.path(),
        &["plugins", "install", "--enable", dir.to_str().unwrap()],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    // Nothing in it is Hermes's: the default, said so, never silently.
    assert!(
        said.contains("Loads as a flowly plugin, the default: nothing in its files is specific to another plugin API. If it is written for another plugin API, install it with --dialect NAME"),
        "{said}"
    );
    let out = run(
        home.path(),
        bundled.path(),
        &["tools", "call", "greet", "--args", "{\"name\": \"Ada\"}"],
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Hello, Ada!"));
}
