//! Where a Hermes model-provider plugin's calls go (issue 52 item 1, in
//! the shape of Hermes's bundled `plugins/model-providers/` and public
//! provider plugins): an `env_vars` entry ending in `_BASE_URL` names the
//! base URL, not the key (Hermes's `hermes_cli/auth.py`), and its value
//! replaces the declared URL; a bundled provider's name keeps Hermes's
//! built-in variable (`DEEPSEEK_BASE_URL`); `--base-url` replaces it for
//! one run, and gives a provider that declares none (`custom`) its
//! endpoint. The declared hosts are `.invalid`: a call reaching one would
//! fail the test.

use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded, write_plugin};
use crate::hermes_model_provider::stub;
use serde_json::Value;

/// Three provider plugins: one with a URL variable among its `env_vars`,
/// one named like Hermes's built-in `deepseek`, one with no base URL.
fn home() -> tempfile::TempDir {
    let home = home_with(&["myprov", "deepseek", "custom"]);
    let plugins = home.path().join("plugins");
    let profile = |name: &str, fields: &str| {
        format!(
            "from providers import register_provider\nfrom providers.base import ProviderProfile\n\nregister_provider(ProviderProfile(name=\"{name}\", {fields}, fallback_models=(\"m1\",)))\n"
        )
    };
    let manifest = |name: &str| format!("name: {name}\nkind: model-provider\nversion: 1.0.0\n");
    for (name, fields) in [
        (
            "myprov",
            "env_vars=(\"MYPROV_API_KEY\", \"MYPROV_BASE_URL\"), base_url=\"https://api.myprov.invalid/v1\"",
        ),
        (
            "deepseek",
            "env_vars=(\"DEEPSEEK_API_KEY\",), base_url=\"https://api.deepseek.invalid/v1\"",
        ),
        ("custom", "env_vars=(), base_url=\"\""),
    ] {
        write_plugin(
            &plugins,
            name,
            &manifest(name),
            &[("__init__.py", &profile(name, fields))],
        );
    }
    home
}

fn run(home: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let bundled = no_bundled();
    let hermes = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.args(args)
        .env("PLUGHOST_HOME", home)
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("HERMES_HOME", hermes.path())
        .env_remove("OPENAI_BASE_URL")
        .env_remove("PLUGHOST_LOG");
    for var in [
        "MYPROV_API_KEY",
        "MYPROV_BASE_URL",
        "DEEPSEEK_API_KEY",
        "DEEPSEEK_BASE_URL",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_bounded(cmd, Duration::from_secs(90))
}

fn reply(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    report["reply"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_base_url_variable_replaces_the_declared_url_and_is_never_the_key() {
    let s = stub("from the local endpoint");
    let home = home();
    let env = [
        ("MYPROV_API_KEY", "sk-mine"),
        ("MYPROV_BASE_URL", s.url.as_str()),
    ];
    let out = run(
        home.path(),
        &["run", "--json", "--model", "myprov:m1", "hi"],
        &env,
    );
    assert_eq!(reply(&out), "from the local endpoint");
    let seen = s.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-mine"));
    let doctor = run(home.path(), &["plugins", "doctor"], &env);
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        text.contains(&format!(
            "model provider myprov at {} (from MYPROV_BASE_URL): key set (MYPROV_API_KEY)",
            s.url
        )),
        "{text}"
    );
    // Without the key, the URL is not taken for one.
    let out = run(
        home.path(),
        &["run", "--model", "myprov:m1", "hi"],
        &[("MYPROV_BASE_URL", s.url.as_str())],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs its key: set MYPROV_API_KEY"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_built_in_providers_variable_and_base_url_flag_redirect_the_calls() {
    let s = stub("from deepseek's stand-in");
    let home = home();
    let env = [
        ("DEEPSEEK_API_KEY", "sk-ds"),
        ("DEEPSEEK_BASE_URL", s.url.as_str()),
    ];
    let out = run(
        home.path(),
        &["run", "--json", "--model", "deepseek:m1", "hi"],
        &env,
    );
    assert_eq!(reply(&out), "from deepseek's stand-in");
    // --base-url wins over the variable and the declared URL.
    let other = stub("from the flag's endpoint");
    let env = [
        ("DEEPSEEK_API_KEY", "sk-ds"),
        ("DEEPSEEK_BASE_URL", "http://127.0.0.1:9/v1"),
    ];
    let args = [
        "run",
        "--json",
        "--model",
        "deepseek:m1",
        "--base-url",
        other.url.as_str(),
        "hi",
    ];
    assert_eq!(
        reply(&run(home.path(), &args, &env)),
        "from the flag's endpoint"
    );
    assert_eq!(s.seen.lock().unwrap().len(), 1);
}

#[test]
fn a_provider_with_no_base_url_says_how_to_give_one_and_takes_the_flag() {
    let s = stub("from my own server");
    let home = home();
    let out = run(home.path(), &["run", "--model", "custom:m1", "hi"], &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("model provider 'custom' (custom) declares no base URL: pass --base-url"),
        "{stderr}"
    );
    let args = [
        "run",
        "--json",
        "--model",
        "custom:m1",
        "--base-url",
        s.url.as_str(),
        "hi",
    ];
    assert_eq!(reply(&run(home.path(), &args, &[])), "from my own server");
    assert!(s.seen.lock().unwrap()[0].header("authorization").is_none());
}
