//! Plugin lifecycle through the CLI: install, remove, enable, doctor.
//! Git sources are local `file://` repositories made by the tests: no network.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::{no_bundled, write_plugin};
use serde_json::Value;

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
    work: tempfile::TempDir,
}

fn env() -> Env {
    Env {
        home: tempfile::tempdir().unwrap(),
        bundled: no_bundled(),
        work: tempfile::tempdir().unwrap(),
    }
}

fn plughost(env: &Env, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(args)
        .env("PLUGHOST_HOME", env.home.path())
        .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
        .env(
            "PLUGHOST_GIT_BASE_URL",
            format!("file://{}", env.work.path().display()),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const PLUGIN_INIT: &str =
    "def register(ctx):\n    ctx.register_tool('hello', {}, lambda: 'hello from the plugin')\n";

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args([
            "-c",
            "user.email=t@example.com",
            "-c",
            "user.name=tests",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

/// A git repository at `work/<owner>/<name>.git` with files, committed.
fn repo(env: &Env, owner: &str, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = env.work.path().join(owner).join(format!("{name}.git"));
    std::fs::create_dir_all(&dir).unwrap();
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    git(&dir, &["init", "-q"]);
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-qm", "plugin"]);
    dir
}

fn installed(env: &Env) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(env.home.path().join("plugins"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn config(env: &Env) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(env.home.path().join("config.json"))
            .unwrap_or_else(|_| "{}".into()),
    )
    .unwrap()
}

#[test]
fn install_from_a_git_repository_root_and_enable() {
    let env = env();
    let r = repo(
        &env,
        "acme",
        "hello",
        &[
            ("plugin.yaml", "name: hello\nversion: 1.0.0\n"),
            ("__init__.py", PLUGIN_INIT),
        ],
    );
    let o = plughost(
        &env,
        &[
            "plugins",
            "install",
            &format!("file://{}", r.display()),
            "--enable",
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("Installed hello 1.0.0"), "{}", out(&o));
    assert!(out(&o).contains("Restart plughost for changes to apply."));
    assert!(
        err(&o).contains("Cloning"),
        "progress is shown: {}",
        err(&o)
    );
    assert_eq!(installed(&env), ["hello"]);
    assert!(
        !env.home.path().join("plugins/hello/.git").exists(),
        "only the plugin directory is copied"
    );
    assert_eq!(
        config(&env)["plugins"]["enabled"],
        serde_json::json!(["hello"])
    );
    assert_eq!(
        out(&plughost(&env, &["tools", "call", "hello"])),
        "hello from the plugin\n"
    );
}

#[test]
fn install_monorepo_subpaths_by_fragment_and_by_owner_repo_path() {
    let env = env();
    repo(
        &env,
        "acme",
        "mono",
        &[
            ("README.md", "monorepo"),
            ("plugins/alpha/plugin.yaml", "name: alpha\n"),
            ("plugins/alpha/__init__.py", PLUGIN_INIT),
            ("plugins/beta/plugin.json", "{\"name\": \"beta\"}"),
            ("plugins/beta/__init__.py", PLUGIN_INIT),
        ],
    );
    let url = format!(
        "file://{}/acme/mono.git#plugins/alpha",
        env.work.path().display()
    );
    let o = plughost(&env, &["plugins", "install", &url]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        out(&o).contains("plughost plugins enable alpha"),
        "default is --no-enable: {}",
        out(&o)
    );
    let o = plughost(&env, &["plugins", "install", "acme/mono/plugins/beta"]);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(installed(&env), ["alpha", "beta"]);
    assert!(!env.home.path().join("plugins/alpha/README.md").exists());
    let lists = config(&env);
    assert!(lists["plugins"]["enabled"]
        .as_array()
        .map(|a| a.is_empty())
        .unwrap_or(true));
    let both = plughost(
        &env,
        &["plugins", "install", "acme/mono/plugins/beta#plugins/alpha"],
    );
    assert_eq!(both.status.code(), Some(2));
    assert!(err(&both).contains("not both"), "{}", err(&both));
}

#[test]
fn install_from_a_local_directory_and_force_replace() {
    let env = env();
    let src = write_plugin(
        env.work.path(),
        "local-one",
        "name: local-one\nversion: 1\n",
        &[("__init__.py", PLUGIN_INIT), ("data/notes.txt", "kept")],
    );
    let o = plughost(&env, &["plugins", "install", src.to_str().unwrap()]);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(
        std::fs::read_to_string(env.home.path().join("plugins/local-one/data/notes.txt")).unwrap(),
        "kept"
    );
    std::fs::write(src.join("plugin.yaml"), "name: local-one\nversion: 2\n").unwrap();
    let again = plughost(&env, &["plugins", "install", src.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1));
    assert!(err(&again).contains("--force"), "{}", err(&again));
    let forced = plughost(
        &env,
        &["plugins", "install", src.to_str().unwrap(), "--force"],
    );
    assert!(forced.status.success(), "{}", err(&forced));
    assert!(
        out(&forced).contains("Replaced local-one 2"),
        "{}",
        out(&forced)
    );
    assert_eq!(installed(&env), ["local-one"]);
}

#[test]
fn refusals_leave_nothing_behind() {
    let env = env();
    let outside = env.work.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "s").unwrap();
    let r = repo(
        &env,
        "acme",
        "bad",
        &[
            ("no-manifest/__init__.py", PLUGIN_INIT),
            ("no-init/plugin.yaml", "name: no-init\n"),
            ("bad-manifest/plugin.yaml", "manifest_version: 9\n"),
            ("bad-manifest/__init__.py", PLUGIN_INIT),
            ("leaky/plugin.yaml", "name: leaky\n"),
            ("leaky/__init__.py", PLUGIN_INIT),
        ],
    );
    std::os::unix::fs::symlink(&outside, r.join("escape")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), r.join("leaky/secret.txt")).unwrap();
    git(&r, &["add", "-A"]);
    git(&r, &["commit", "-qm", "links"]);
    let url = |frag: &str| format!("file://{}#{frag}", r.display());
    let cases = [
        (url("../outside"), "would leave the repository"),
        (url("/etc"), "absolute"),
        (url("escape"), "outside the repository"),
        (url("missing/dir"), "no such path"),
        (url("no-manifest"), "no manifest"),
        (url("no-init"), "no __init__.py"),
        (url("bad-manifest"), "manifest_version 9"),
        (url("leaky"), "points outside the plugin"),
        (
            format!("file://{}/nothing-here.git", env.work.path().display()),
            "repository not found",
        ),
        ("./no/such/dir".to_string(), "no such directory"),
    ];
    for (source, expected) in cases {
        let o = plughost(&env, &["plugins", "install", &source]);
        assert_ne!(o.status.code(), Some(0), "{source} should be refused");
        assert!(
            err(&o).contains(expected),
            "{source}: expected '{expected}' in: {}",
            err(&o)
        );
        assert!(
            installed(&env).is_empty(),
            "{source} left {:?} behind",
            installed(&env)
        );
    }
}

#[test]
fn remove_asks_refuses_without_terminal_and_cleans_config() {
    let env = env();
    let src = write_plugin(
        env.work.path(),
        "gone",
        "name: gone\n",
        &[("__init__.py", PLUGIN_INIT)],
    );
    assert!(plughost(
        &env,
        &["plugins", "install", src.to_str().unwrap(), "--enable"]
    )
    .status
    .success());
    assert!(plughost(&env, &["plugins", "disable", "gone"])
        .status
        .success());
    let refused = plughost(&env, &["plugins", "remove", "gone"]);
    assert_ne!(refused.status.code(), Some(0));
    assert!(err(&refused).contains("-y"), "{}", err(&refused));
    assert_eq!(installed(&env), ["gone"]);
    let o = plughost(&env, &["plugins", "remove", "gone", "-y"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("Restart plughost for changes to apply."));
    assert!(installed(&env).is_empty());
    let lists = config(&env);
    assert_eq!(lists["plugins"]["enabled"], serde_json::json!([]));
    assert_eq!(lists["plugins"]["disabled"], serde_json::json!([]));
    let unknown = plughost(&env, &["plugins", "remove", "gone", "-y"]);
    assert_ne!(unknown.status.code(), Some(0));
    write_plugin(
        env.bundled.path(),
        "shipped",
        "name: shipped\n",
        &[("__init__.py", PLUGIN_INIT)],
    );
    let bundled = plughost(&env, &["plugins", "remove", "shipped", "-y"]);
    assert!(
        err(&bundled).contains("plughost plugins disable shipped"),
        "{}",
        err(&bundled)
    );
}

#[test]
fn concurrent_enables_all_land_and_a_corrupt_config_is_never_overwritten() {
    let env = env();
    std::fs::write(
        env.home.path().join("config.json"),
        r#"{"model": "keep-me"}"#,
    )
    .unwrap();
    let children: Vec<_> = (0..12)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_plughost"))
                .args(["plugins", "enable", &format!("p{i}"), "--force"])
                .env("PLUGHOST_HOME", env.home.path())
                .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let doc = config(&env);
    assert_eq!(doc["model"], "keep-me");
    let mut enabled: Vec<String> =
        serde_json::from_value(doc["plugins"]["enabled"].clone()).unwrap();
    enabled.sort();
    let mut expected: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
    expected.sort();
    assert_eq!(enabled, expected, "no enable was lost");

    std::fs::write(
        env.home.path().join("config.json"),
        "{\n  \"plugins\": oops\n}",
    )
    .unwrap();
    let src = write_plugin(
        env.work.path(),
        "x",
        "name: x\n",
        &[("__init__.py", PLUGIN_INIT)],
    );
    for args in [
        vec!["plugins", "enable", "x"],
        vec!["plugins", "disable", "x"],
        vec!["plugins", "install", src.to_str().unwrap(), "--enable"],
    ] {
        let o = plughost(&env, &args);
        assert_ne!(o.status.code(), Some(0), "{args:?}");
        assert!(
            err(&o).contains("config.json is not valid JSON (line 2"),
            "{args:?}: {}",
            err(&o)
        );
    }
    assert_eq!(
        std::fs::read_to_string(env.home.path().join("config.json")).unwrap(),
        "{\n  \"plugins\": oops\n}"
    );
}

#[test]
fn hosts_starting_together_share_one_extraction_of_the_bundled_plugins() {
    let env = env();
    let cache = tempfile::tempdir().unwrap();
    // Without PLUGHOST_BUNDLED_DIR each host writes the bundled plugins out
    // to the cache itself, all at the same moment.
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_plughost"))
                .args(["plugins", "list"])
                .env("PLUGHOST_HOME", env.home.path())
                .env_remove("PLUGHOST_BUNDLED_DIR")
                .env("XDG_CACHE_HOME", cache.path())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", err(&o));
        assert!(
            out(&o)
                .lines()
                .any(|l| l.starts_with("disk-cleanup") && l.contains("bundled")),
            "{}\n{}",
            out(&o),
            err(&o)
        );
        assert!(!err(&o).contains("could not write"), "{}", err(&o));
    }
    let extracted: Vec<PathBuf> = std::fs::read_dir(cache.path().join("plughost"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        extracted.len(),
        1,
        "one copy and no staging directories: {extracted:?}"
    );
    let name = extracted[0].file_name().unwrap().to_string_lossy();
    assert!(name.starts_with("bundled-"), "{name}");
    assert!(extracted[0].join(".complete").is_file());
}

#[test]
fn doctor_reports_status_env_silent_hooks_and_collisions() {
    let env = env();
    let plugins = env.home.path().join("plugins");
    write_plugin(
        &plugins,
        "first",
        "name: first\nrequires_env:\n  - PLUGHOST_TEST_SET_VAR\n  - PLUGHOST_TEST_UNSET_VAR\n",
        &[("__init__.py", "def register(ctx):\n    ctx.register_tool('shared', {}, lambda: 'first')\n    ctx.register_hook('on_sesion_end', lambda c: None)\n    ctx.register_hook('post_tool_call', lambda c: None)\n")],
    );
    write_plugin(
        &plugins,
        "second",
        "name: second\n",
        &[(
            "__init__.py",
            "def register(ctx):\n    ctx.register_tool('shared', {}, lambda: 'second')\n",
        )],
    );
    write_plugin(
        &plugins,
        "broken",
        "name: broken\n",
        &[(
            "__init__.py",
            "raise ImportError('missing dependency foo')\n",
        )],
    );
    write_plugin(
        &plugins,
        "idle",
        "name: idle\n",
        &[("__init__.py", PLUGIN_INIT)],
    );
    std::fs::write(
        env.home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["first", "second", "broken"]}}"#,
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_plughost"))
            .args(args)
            .env("PLUGHOST_HOME", env.home.path())
            .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
            .env("PLUGHOST_TEST_SET_VAR", "1")
            .env_remove("PLUGHOST_TEST_UNSET_VAR")
            .output()
            .unwrap()
    };
    let o = run(&["plugins", "doctor", "--json"]);
    assert_eq!(o.status.code(), Some(1), "an enabled plugin failed");
    let report: Value = serde_json::from_str(&out(&o)).unwrap();
    let plugin = |k: &str| {
        report["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["key"] == k)
            .unwrap()
            .clone()
    };
    assert_eq!(plugin("broken")["status"], "failed");
    assert_eq!(
        plugin("broken")["error"],
        "ImportError: missing dependency foo"
    );
    assert_eq!(plugin("idle")["status"], "not-enabled");
    assert_eq!(plugin("first")["status"], "loaded");
    assert_eq!(
        plugin("first")["requires_env"],
        serde_json::json!([{"name": "PLUGHOST_TEST_SET_VAR", "set": true}, {"name": "PLUGHOST_TEST_UNSET_VAR", "set": false}])
    );
    let silent = plugin("first")["silent_hooks"].clone();
    assert_eq!(silent[0]["event"], "on_sesion_end");
    assert!(silent[0]["reason"]
        .as_str()
        .unwrap()
        .contains("never fires"));
    assert_eq!(
        report["tool_collisions"],
        serde_json::json!([{"tool": "shared", "winner": "second", "overridden": "first"}])
    );
    assert!(report["python"]["version"]
        .as_str()
        .unwrap()
        .starts_with("3."));
    assert!(report["python"]["path"].as_array().unwrap().len() > 1);

    let text = run(&["plugins", "doctor"]);
    assert!(
        out(&text).contains("requires_env PLUGHOST_TEST_UNSET_VAR: NOT set"),
        "{}",
        out(&text)
    );
    assert!(
        out(&text).contains("shared: 'second' replaced 'first'"),
        "{}",
        out(&text)
    );
    assert!(
        out(&text).contains("1 enabled plugin(s) failed to load: broken"),
        "{}",
        out(&text)
    );

    let slash = run(&["commands", "run", "/plugins"]);
    assert!(out(&slash).contains("✓ first (user)"), "{}", out(&slash));
    assert!(
        out(&slash).contains("✗ broken (user) failed: ImportError: missing dependency foo"),
        "{}",
        out(&slash)
    );

    std::fs::write(
        env.home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["first"]}}"#,
    )
    .unwrap();
    assert_eq!(run(&["plugins", "doctor"]).status.code(), Some(0));
}
