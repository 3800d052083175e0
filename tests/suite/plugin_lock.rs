//! Pinned, recorded and checked installs (`plugins install --ref`,
//! `<home>/plugins.lock.json`, `--from-lock`, `plugins accept`,
//! `--editable`), driven through the real CLI binary in temp homes. Git
//! sources are local repositories made in temp directories: nothing leaves
//! the machine.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{home_with, no_bundled};
use serde_json::Value;

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

fn env() -> Env {
    Env {
        home: home_with(&[]),
        bundled: no_bundled(),
    }
}

impl Env {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_plughost"))
            .args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env_remove("PLUGHOST_LOG")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
            .env_remove("PLUGHOST_GIT_BASE_URL")
            .output()
            .unwrap()
    }

    fn lock_path(&self) -> PathBuf {
        self.home.path().join("plugins.lock.json")
    }

    fn lock(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.lock_path()).unwrap()).unwrap()
    }

    fn list(&self) -> Vec<Value> {
        let out = self.run(&["plugins", "list", "--json"]);
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_str::<Value>(&stdout(&out))
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    fn record(&self, key: &str) -> Value {
        self.list()
            .into_iter()
            .find(|p| p["key"] == key)
            .unwrap_or_else(|| panic!("no plugin {key}"))
    }

    fn call(&self, tool: &str) -> String {
        stdout(&self.run(&["tools", "call", tool]))
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

const MANIFEST: &str =
    "name: pin\nversion: 1.0.0\nprovides_hooks: [pre_tool_call]\nprovides_tools: [which]\n";

fn plugin_code(answer: &str) -> String {
    format!("def register(ctx):\n    ctx.register_tool(\"which\", {{}}, lambda: \"{answer}\")\n")
}

/// A git repository holding plugin `pin` whose tool `which` answers `old`
/// in the first commit and `new` in the second; the repository and the
/// first commit.
fn repo() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    git(repo, &["init", "-q"]);
    std::fs::write(repo.join("plugin.yaml"), MANIFEST).unwrap();
    std::fs::write(repo.join("__init__.py"), plugin_code("old")).unwrap();
    git(repo, &["add", "."]);
    git(repo, &["commit", "-qm", "old"]);
    let old = git(repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("__init__.py"), plugin_code("new")).unwrap();
    git(repo, &["commit", "-qam", "new"]);
    (dir, old)
}

fn file_url(p: &Path) -> String {
    format!("file://{}", p.display())
}

#[test]
fn ref_pins_an_old_commit_and_records_it() {
    let (repo, old) = repo();
    let env = env();
    let url = file_url(repo.path());
    let out = env.run(&["plugins", "install", &url, "--ref", &old, "--enable"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains(&format!("commit {old}")),
        "{}",
        text(&out)
    );
    let code = std::fs::read_to_string(env.home.path().join("plugins/pin/__init__.py")).unwrap();
    assert!(code.contains("\"old\""), "{code}");
    assert_eq!(env.call("which"), "old\n");

    let entry = &env.lock()["plugins"]["pin"];
    assert_eq!(entry["source"], url.as_str());
    assert_eq!(entry["commit"], old.as_str());
    assert!(
        entry["hash"].as_str().unwrap().starts_with("sha256:"),
        "{entry}"
    );
    assert_eq!(entry["files"].as_object().unwrap().len(), 2, "{entry}");
    assert_eq!(entry["dialect"], "flowly");
    assert_eq!(entry["version"], "1.0.0");
    assert_eq!(
        entry["capabilities"],
        serde_json::json!({"hooks": ["pre_tool_call"], "tools": ["which"], "web_providers": []})
    );
    assert_eq!(entry["editable"], false);
    // plugins list --json shows the same entry.
    assert_eq!(&env.record("pin")["lock"], entry);

    // Without --ref: the head, and its commit recorded.
    let head = git(repo.path(), &["rev-parse", "HEAD"]);
    let out = env.run(&["plugins", "install", &url, "--force"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(env.lock()["plugins"]["pin"]["commit"], head.as_str());
    assert_eq!(env.call("which"), "new\n");

    // A local directory with --ref is cloned from its repository.
    let path = repo.path().to_str().unwrap();
    let out = env.run(&["plugins", "install", path, "--ref", &old, "--force"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(env.lock()["plugins"]["pin"]["commit"], old.as_str());
    assert_eq!(env.call("which"), "old\n");
}

#[test]
fn a_bad_ref_is_named_and_keeps_the_installed_plugin() {
    let (repo, old) = repo();
    let env = env();
    let url = file_url(repo.path());
    let out = env.run(&["plugins", "install", &url, "--ref", &old, "--enable"]);
    assert!(out.status.success(), "{}", text(&out));
    let lock_before = std::fs::read_to_string(env.lock_path()).unwrap();
    let out = env.run(&[
        "plugins",
        "install",
        &url,
        "--ref",
        "no-such-rev",
        "--force",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'no-such-rev' is not a revision"), "{err}");
    assert!(err.contains("nothing was installed or replaced"), "{err}");
    assert_eq!(env.call("which"), "old\n");
    assert_eq!(
        std::fs::read_to_string(env.lock_path()).unwrap(),
        lock_before
    );
    // No scratch left behind in the plugins directory.
    let left: Vec<_> = std::fs::read_dir(env.home.path().join("plugins"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("pin")]);
}

#[test]
fn from_lock_reproduces_the_set_in_a_fresh_home() {
    let (repo, old) = repo();
    let first = env();
    let url = file_url(repo.path());
    let out = first.run(&["plugins", "install", &url, "--ref", &old]);
    assert!(out.status.success(), "{}", text(&out));
    // A second plugin from a local directory (no commit).
    let local = tempfile::tempdir().unwrap();
    common::write_plugin(
        local.path(),
        "plain",
        "name: plain\n",
        &[(
            "__init__.py",
            &plugin_code("plain").replace("which", "plainly"),
        )],
    );
    let out = first.run(&[
        "plugins",
        "install",
        local.path().join("plain").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));

    // The repository moves on; the lock still names the old commit.
    let fresh = env();
    let lock = first.lock_path();
    let out = fresh.run(&[
        "plugins",
        "install",
        "--from-lock",
        lock.to_str().unwrap(),
        "--enable",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains("Installed 2 of 2 plugins"),
        "{}",
        text(&out)
    );
    assert_eq!(fresh.call("which"), "old\n");
    assert_eq!(fresh.call("plainly"), "plain\n");
    assert_eq!(
        fresh.lock()["plugins"]["pin"],
        first.lock()["plugins"]["pin"]
    );

    // An entry whose hash the fetched files do not have is refused with
    // both hashes named; the other entries still install.
    let mut tampered = first.lock();
    let real = tampered["plugins"]["pin"]["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let bogus = format!("sha256:{}", "0".repeat(64));
    tampered["plugins"]["pin"]["hash"] = Value::from(bogus.as_str());
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), tampered.to_string()).unwrap();
    let third = env();
    let out = third.run(&[
        "plugins",
        "install",
        "--from-lock",
        file.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&bogus) && err.contains(&real), "{err}");
    assert!(!third.home.path().join("plugins/pin").exists());
    assert!(third.home.path().join("plugins/plain").exists());
    assert!(third.lock()["plugins"].get("pin").is_none());
}

#[test]
fn a_tampered_plugin_is_refused_until_accepted() {
    let (repo, old) = repo();
    let env = env();
    let out = env.run(&[
        "plugins",
        "install",
        &file_url(repo.path()),
        "--ref",
        &old,
        "--enable",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let hash_before = env.lock()["plugins"]["pin"]["hash"].clone();
    let code = env.home.path().join("plugins/pin/__init__.py");
    std::fs::write(&code, plugin_code("tampered")).unwrap();
    std::fs::write(env.home.path().join("plugins/pin/extra.py"), "x = 1\n").unwrap();

    let record = env.record("pin");
    assert_eq!(record["loaded"], false, "{record}");
    let error = record["error"].as_str().unwrap();
    assert!(
        error.contains("modified: __init__.py") && error.contains("added: extra.py"),
        "{error}"
    );
    assert!(error.contains("plughost plugins accept pin"), "{error}");
    let table = stdout(&env.run(&["plugins", "list"]));
    assert!(
        table.contains("its files changed since it was installed"),
        "{table}"
    );
    assert!(env.call("which").contains("not found"));
    // plugins doctor shows the entry and what changed.
    let doctor = env.run(&["plugins", "doctor", "--json"]);
    let report: Value = serde_json::from_str(&stdout(&doctor)).unwrap();
    let state = report["lock"]["plugins"]["pin"]["state"].as_str().unwrap();
    assert!(
        state.starts_with("changed (modified: __init__.py"),
        "{state}"
    );
    let doctor = stdout(&env.run(&["plugins", "doctor"]));
    assert!(doctor.contains("lock file: "), "{doctor}");
    assert!(doctor.contains("  pin: commit "), "{doctor}");
    // Bytecode Python writes is not a change.
    std::fs::create_dir_all(env.home.path().join("plugins/pin/__pycache__")).unwrap();

    let out = env.run(&["plugins", "accept", "pin"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains("modified: __init__.py") && shown.contains("added: extra.py"),
        "{shown}"
    );
    assert_ne!(env.lock()["plugins"]["pin"]["hash"], hash_before);
    assert_eq!(env.call("which"), "tampered\n");
    let again = env.run(&["plugins", "accept", "pin"]);
    assert!(
        stdout(&again).contains("Nothing changed"),
        "{}",
        text(&again)
    );

    // plugins remove drops the entry.
    let out = env.run(&["plugins", "remove", "pin", "-y"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(env.lock()["plugins"].get("pin").is_none());
}

#[test]
fn an_editable_install_is_linked_exempt_and_marked() {
    let env = env();
    let work = tempfile::tempdir().unwrap();
    let dir = common::write_plugin(
        work.path(),
        "dev",
        MANIFEST.replace("pin", "dev").as_str(),
        &[("__init__.py", &plugin_code("v1"))],
    );
    let out = env.run(&[
        "plugins",
        "install",
        "--editable",
        dir.to_str().unwrap(),
        "--enable",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let linked = env.home.path().join("plugins/dev");
    assert!(std::fs::symlink_metadata(&linked)
        .unwrap()
        .file_type()
        .is_symlink());
    let entry = &env.lock()["plugins"]["dev"];
    assert_eq!(entry["editable"], true, "{entry}");
    assert_eq!(entry["hash"], Value::Null);
    assert_eq!(env.record("dev")["lock"]["editable"], true);
    assert_eq!(env.call("which"), "v1\n");
    // Edits are picked up, not refused.
    std::fs::write(dir.join("__init__.py"), plugin_code("v2")).unwrap();
    assert_eq!(env.call("which"), "v2\n");
    // --editable takes a directory, not a pinned git source.
    let refused = env.run(&[
        "plugins",
        "install",
        "--editable",
        dir.to_str().unwrap(),
        "--ref",
        "HEAD",
    ]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    // Removing it removes the link, never the directory worked on.
    let out = env.run(&["plugins", "remove", "dev", "-y"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!linked.exists() && !linked.is_symlink());
    assert!(dir.join("__init__.py").is_file());
}

#[test]
fn a_corrupt_lock_file_is_reported_and_kept() {
    let env = env();
    let local = tempfile::tempdir().unwrap();
    let dir = common::write_plugin(
        local.path(),
        "pin",
        MANIFEST,
        &[("__init__.py", &plugin_code("old"))],
    );
    let out = env.run(&["plugins", "install", dir.to_str().unwrap(), "--enable"]);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(env.lock_path(), "{ this is not json").unwrap();

    let record = env.record("pin");
    let error = record["error"].as_str().unwrap();
    assert!(
        error.contains("plugins.lock.json is not a usable plugin lock file"),
        "{error}"
    );
    assert_eq!(record["loaded"], false);

    let other = common::write_plugin(
        local.path(),
        "other",
        "name: other\n",
        &[("__init__.py", "def register(ctx):\n    pass\n")],
    );
    let out = env.run(&["plugins", "install", other.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("left as it is"),
        "{}",
        text(&out)
    );
    assert!(!env.home.path().join("plugins/other").exists());
    let out = env.run(&["plugins", "accept", "pin"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(env.lock_path()).unwrap(),
        "{ this is not json"
    );
}

#[test]
fn plugins_without_an_entry_load_as_before() {
    let env = env();
    common::write_plugin(
        &env.home.path().join("plugins"),
        "byhand",
        "name: byhand\n",
        &[("__init__.py", &plugin_code("by hand"))],
    );
    let out = env.run(&["plugins", "enable", "byhand"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(env.call("which"), "by hand\n");
    assert_eq!(env.record("byhand")["lock"], Value::Null);
    assert!(!env.lock_path().exists());
}

/// A plugin a dialect finds itself in `<home>/plugins/` (a Felix source
/// tree, no manifest) is checked as well.
#[test]
fn a_tampered_felix_source_tree_is_refused_too() {
    let env = env();
    let src = tempfile::tempdir().unwrap();
    let tree = src.path().join("tree");
    std::fs::create_dir_all(tree.join("src/lock_felix")).unwrap();
    std::fs::write(
        tree.join("pyproject.toml"),
        "[project]\nname = \"tree\"\nversion = \"0.1.0\"\n\n[project.entry-points.\"felix.plugins\"]\nlocked = \"lock_felix:register\"\n",
    )
    .unwrap();
    std::fs::write(
        tree.join("src/lock_felix/__init__.py"),
        "def register(registry):\n    pass\n",
    )
    .unwrap();
    let out = env.run(&["plugins", "install", tree.to_str().unwrap(), "--enable"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(env.lock()["plugins"]["locked"]["dialect"], "felix");
    assert_eq!(env.record("locked")["loaded"], true);
    std::fs::write(
        env.home
            .path()
            .join("plugins/locked/src/lock_felix/__init__.py"),
        "def register(registry):\n    pass  # changed\n",
    )
    .unwrap();
    let record = env.record("locked");
    assert_eq!(record["loaded"], false, "{record}");
    let error = record["error"].as_str().unwrap();
    assert!(
        error.contains("modified: src/lock_felix/__init__.py"),
        "{error}"
    );
    let out = env.run(&["plugins", "accept", "locked"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(env.record("locked")["loaded"], true);
}
