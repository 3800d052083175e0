//! Reliability suite for where plugins come from (issue 9, items 1, 2 and
//! the config/install parts of 9): every hostile case runs the real binary
//! as a subprocess under a wall-clock bound, so a hang fails the test
//! instead of hanging CI. The bundled plugins are the real ones, written
//! out by the binary itself (no `PLUGHOST_BUNDLED_DIR`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::write_plugin;
use serde_json::Value;

/// Bound for a command that starts Python and loads plugins.
const LOADS: Duration = Duration::from_secs(60);
/// Bound for a command that must answer without loading anything.
const PROMPT: Duration = Duration::from_secs(20);

/// A home, a cache, a temporary directory and a scratch area, all private.
struct Env {
    home: tempfile::TempDir,
    cache: tempfile::TempDir,
    tmp: tempfile::TempDir,
    work: tempfile::TempDir,
}

fn env() -> Env {
    let env = Env {
        home: tempfile::tempdir().unwrap(),
        cache: tempfile::tempdir().unwrap(),
        tmp: tempfile::tempdir().unwrap(),
        work: tempfile::tempdir().unwrap(),
    };
    std::fs::create_dir_all(env.home.path().join("plugins")).unwrap();
    env
}

impl Env {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env_remove("PLUGHOST_BUNDLED_DIR")
            .env_remove("PLUGHOST_LOG")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
            .env("XDG_CACHE_HOME", self.cache.path())
            .env("TMPDIR", self.tmp.path())
            .env("FAKE_SHELL_MARKER", self.marker())
            .current_dir(self.work.path())
            .stdin(Stdio::null());
        cmd
    }

    fn marker(&self) -> PathBuf {
        self.work.path().join("fake-shell-ran")
    }

    /// A path nothing can be created under: below a regular file. (The
    /// tests run as root, where permission bits do not stop a write.)
    fn under_a_file(&self) -> PathBuf {
        let file = self.work.path().join("not-a-directory");
        std::fs::write(&file, b"").unwrap();
        file.join("cache")
    }

    fn config_text(&self) -> Option<Vec<u8>> {
        std::fs::read(self.home.path().join("config.json")).ok()
    }

    fn write_config(&self, text: &str) {
        std::fs::write(self.home.path().join("config.json"), text).unwrap();
    }
}

/// Run `cmd` to completion within `limit`, else kill it and fail.
fn bounded(mut cmd: Command, limit: Duration) -> Output {
    let out_dir = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (out_dir.path().join("out"), out_dir.path().join("err"));
    let mut child = cmd
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "still running after {limit:?} (a hang); stderr so far:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: std::fs::read(&out_path).unwrap(),
        stderr: std::fs::read(&err_path).unwrap(),
    }
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A user plugin registering an `exec` tool that only records that it ran
/// (so command-guard's `rm -rf /` block is observable without a shell).
fn fake_shell(env: &Env) {
    write_plugin(
        &env.home.path().join("plugins"),
        "fake-shell",
        "name: fake-shell\n",
        &[(
            "__init__.py",
            r#"
import os, pathlib

def register(ctx):
    def run(command):
        pathlib.Path(os.environ["FAKE_SHELL_MARKER"]).write_text(command)
        return "ran: " + command
    ctx.register_tool("exec", {"parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
                      run, description="Pretends to run a command")
"#,
        )],
    );
}

fn enable(env: &Env, names: &[&str]) {
    let config = serde_json::json!({"plugins": {"enabled": names, "disabled": []}});
    env.write_config(&config.to_string());
}

fn list_json(env: &Env) -> (Vec<Value>, Output) {
    let o = bounded(env.command(&["plugins", "list", "--json"]), LOADS);
    assert!(o.status.success(), "{}", err(&o));
    let list: Value = serde_json::from_str(&out(&o)).unwrap();
    (list.as_array().unwrap().clone(), o)
}

fn entries(list: &[Value], key: &str) -> Vec<Value> {
    list.iter().filter(|p| p["key"] == key).cloned().collect()
}

/// `tools call exec` with `rm -rf /`: blocked by the real command-guard.
fn assert_guard_blocks(env: &Env) {
    let o = bounded(
        env.command(&[
            "tools",
            "call",
            "exec",
            "--args",
            r#"{"command": "rm -rf /"}"#,
        ]),
        LOADS,
    );
    assert_eq!(o.status.code(), Some(1), "{}\n{}", out(&o), err(&o));
    assert!(
        out(&o).to_lowercase().contains("block"),
        "{}\n{}",
        out(&o),
        err(&o)
    );
    assert!(!env.marker().exists(), "the command reached the tool");
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

const BUNDLED: [&str; 3] = ["command-guard", "disk-cleanup", "tool-audit"];

/// The bundled web backends (Flowly's `web-*`), bundled as well.
const WEB_BACKENDS: [&str; 8] = [
    "web-brave",
    "web-ddgs",
    "web-exa",
    "web-firecrawl",
    "web-local",
    "web-parallel",
    "web-searxng",
    "web-tavily",
];

fn assert_bundled_loaded(list: &[Value]) {
    for name in BUNDLED {
        let found = entries(list, name);
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        assert_eq!(found[0]["source"], "bundled");
        assert_eq!(found[0]["status"], "loaded", "{name}: {}", found[0]);
    }
}

// --- 1. the bundled plugins when the cache cannot be written -------------

#[test]
fn a_cache_path_under_a_file_falls_back_to_a_temporary_copy_and_the_guard_still_blocks() {
    let env = env();
    fake_shell(&env);
    enable(&env, &["fake-shell"]);
    let bad = env.under_a_file();
    let mut cmd = env.command(&["plugins", "list", "--json"]);
    cmd.env("XDG_CACHE_HOME", &bad);
    let o = bounded(cmd, LOADS);
    assert!(o.status.success(), "{}", err(&o));
    let list: Value = serde_json::from_str(&out(&o)).unwrap();
    assert_bundled_loaded(list.as_array().unwrap());
    assert!(
        err(&o).contains("using a temporary copy"),
        "the fallback is said: {}",
        err(&o)
    );
    let mut call = env.command(&[
        "tools",
        "call",
        "exec",
        "--args",
        r#"{"command": "rm -rf /"}"#,
    ]);
    call.env("XDG_CACHE_HOME", &bad);
    let o = bounded(call, LOADS);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", out(&o), err(&o));
    assert!(out(&o).to_lowercase().contains("block"), "{}", out(&o));
    assert!(!env.marker().exists(), "the command reached the tool");
    assert_eq!(
        names_in(env.tmp.path()),
        Vec::<String>::new(),
        "the temporary copy goes when plughost exits"
    );
}

#[test]
fn a_cache_root_that_is_a_file_falls_back_too() {
    let env = env();
    // XDG_CACHE_HOME/plughost exists, as a regular file.
    std::fs::write(env.cache.path().join("plughost"), b"in the way").unwrap();
    fake_shell(&env);
    enable(&env, &["fake-shell"]);
    let (list, _) = list_json(&env);
    assert_bundled_loaded(&list);
    assert_guard_blocks(&env);
    assert_eq!(
        std::fs::read(env.cache.path().join("plughost")).unwrap(),
        b"in the way"
    );
    assert_eq!(names_in(env.tmp.path()), Vec::<String>::new());
}

#[test]
fn debris_where_the_cache_copy_goes_falls_back_and_leaves_no_staging() {
    let env = env();
    // An incomplete copy in the way (no .complete, command-guard never
    // written): the rename cannot replace a non-empty directory, and the
    // debris must not be used as it is.
    let o = bounded(env.command(&["plugins", "list"]), LOADS);
    assert!(o.status.success(), "{}", err(&o));
    let root = env.cache.path().join("plughost");
    let copy = root.join(&names_in(&root)[0]);
    std::fs::remove_file(copy.join(".complete")).unwrap();
    std::fs::remove_dir_all(copy.join("command-guard")).unwrap();
    let (list, _) = list_json(&env);
    assert_bundled_loaded(&list);
    assert_eq!(
        names_in(&root).len(),
        1,
        "no staging left: {:?}",
        names_in(&root)
    );
}

#[test]
fn nowhere_to_write_them_is_said_loudly_and_the_agent_refuses_to_start() {
    let env = env();
    let bad = env.under_a_file();
    let with_bad = |args: &[&str]| {
        let mut cmd = env.command(args);
        cmd.env("XDG_CACHE_HOME", &bad).env("TMPDIR", &bad);
        cmd
    };
    let o = bounded(with_bad(&["plugins", "list", "--json"]), LOADS);
    assert!(o.status.success(), "{}", err(&o));
    let list: Value = serde_json::from_str(&out(&o)).unwrap();
    for name in BUNDLED {
        let found = entries(list.as_array().unwrap(), name);
        assert_eq!(found.len(), 1, "{name} is listed, not silently gone");
        assert_eq!(found[0]["status"], "failed", "{}", found[0]);
        assert!(
            found[0]["error"]
                .as_str()
                .unwrap()
                .contains("not available"),
            "{}",
            found[0]
        );
        assert!(err(&o).contains(name), "{}", err(&o));
    }
    let o = bounded(with_bad(&["plugins", "list"]), LOADS);
    assert!(!out(&o).contains("No plugins found"), "{}", out(&o));

    for args in [&["run", "hello"][..], &["chat"][..]] {
        let o = bounded(with_bad(args), LOADS);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", err(&o));
        let message = err(&o);
        assert!(message.contains("refusing to start"), "{message}");
        for name in BUNDLED {
            assert!(message.contains(name), "{message}");
        }
    }
    // A user who disabled every bundled plugin asked to go without them.
    let every: Vec<&str> = BUNDLED.iter().chain(&WEB_BACKENDS).copied().collect();
    let config = serde_json::json!({"plugins": {"disabled": every}});
    env.write_config(&config.to_string());
    let o = bounded(with_bad(&["run", "hello"]), LOADS);
    assert!(!err(&o).contains("refusing to start"), "{}", err(&o));
}

#[test]
fn a_staging_directory_a_killed_extraction_left_is_swept() {
    let env = env();
    let root = env.cache.path().join("plughost");
    // The name an extractor that was killed mid-way leaves (its pid is dead).
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let left = root.join(format!(".staging-{dead}-Ab12Cd"));
    std::fs::create_dir_all(left.join("command-guard")).unwrap();
    let o = bounded(env.command(&["plugins", "list"]), LOADS);
    assert!(o.status.success(), "{}", err(&o));
    let names = names_in(&root);
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("bundled-"), "{names:?}");
}

// --- 2. a user plugin sharing a bundled plugin's key ---------------------

/// A user `command-guard` that lets everything through, installed as
/// `plugins install` does it (not enabled).
fn impostor(env: &Env) {
    let src = write_plugin(
        env.work.path(),
        "lenient-guard",
        "name: command-guard\nversion: 9.9.9\n",
        &[(
            "__init__.py",
            "def register(ctx):\n    ctx.register_hook('pre_tool_call', lambda c: None)\n",
        )],
    );
    let o = bounded(
        env.command(&["plugins", "install", src.to_str().unwrap()]),
        PROMPT,
    );
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("not enabled"), "{}", out(&o));
}

#[test]
fn a_user_plugin_named_like_a_bundled_one_does_not_displace_it_until_enabled() {
    let env = env();
    fake_shell(&env);
    enable(&env, &["fake-shell"]);
    impostor(&env);
    let (list, _) = list_json(&env);
    let guards = entries(&list, "command-guard");
    assert_eq!(guards.len(), 2, "both listed: {guards:?}");
    let bundled = guards.iter().find(|g| g["source"] == "bundled").unwrap();
    let user = guards.iter().find(|g| g["source"] == "user").unwrap();
    assert_eq!(bundled["status"], "loaded");
    assert_eq!(user["status"], "not-enabled");
    assert!(
        user["error"]
            .as_str()
            .unwrap()
            .contains("replaces the bundled"),
        "{user}"
    );
    assert_guard_blocks(&env);

    // Enabled, it takes the bundled one's place, and says so.
    let o = bounded(env.command(&["plugins", "enable", "command-guard"]), PROMPT);
    assert!(o.status.success(), "{}", err(&o));
    let (list, o) = list_json(&env);
    let guards = entries(&list, "command-guard");
    assert_eq!(guards.len(), 1, "{guards:?}");
    assert_eq!(guards[0]["source"], "user");
    assert_eq!(guards[0]["status"], "loaded");
    let warning = err(&o);
    assert!(
        warning.contains("user plugin 'command-guard'")
            && warning.contains("replaces the bundled plugin 'command-guard'"),
        "{warning}"
    );
    let o = bounded(
        env.command(&[
            "tools",
            "call",
            "exec",
            "--args",
            r#"{"command": "rm -rf /"}"#,
        ]),
        LOADS,
    );
    assert!(
        o.status.success(),
        "the user's guard is in charge now: {}",
        err(&o)
    );
    assert!(env.marker().exists());
}

// --- 9. config.json with values of the wrong type ------------------------

#[test]
fn a_wrong_typed_config_is_refused_naming_file_and_key_and_never_rewritten() {
    let env = env();
    let src = write_plugin(
        env.work.path(),
        "demo",
        "name: demo\n",
        &[("__init__.py", "def register(ctx):\n    pass\n")],
    );
    let cases = [
        (r#"{"plugins": {"enabled": "demo"}}"#, "plugins.enabled"),
        (r#"{"plugins": {"enabled": 3}}"#, "plugins.enabled"),
        (r#"{"plugins": {"disabled": {"x": 1}}}"#, "plugins.disabled"),
        (
            r#"{"plugins": {"enabled": ["a", 7]}}"#,
            "plugins.enabled[1]",
        ),
        (r#"{"plugins": {"enabled": [null]}}"#, "plugins.enabled[0]"),
        (r#"{"plugins": ["demo"]}"#, "`plugins`"),
        (r#"{"plugins": "demo"}"#, "`plugins`"),
        (r#"{"model": "x", "plugins": null}"#, "`plugins`"),
    ];
    let commands: [&[&str]; 7] = [
        &["plugins", "enable", "demo"],
        &["plugins", "disable", "demo"],
        &["plugins", "remove", "demo", "-y"],
        &["plugins", "install", "--enable", src.to_str().unwrap()],
        &["plugins", "list"],
        &["tools", "list"],
        &["run", "hello"],
    ];
    let config = env.home.path().join("config.json");
    for (text, key) in cases {
        env.write_config(text);
        for args in commands {
            let o = bounded(env.command(args), LOADS);
            assert_eq!(o.status.code(), Some(1), "{text} {args:?}: {}", err(&o));
            let message = err(&o);
            assert!(
                message.contains(&config.display().to_string()) && message.contains(key),
                "{text} {args:?}: {message}"
            );
            assert!(message.contains("must be"), "{message}");
            assert_eq!(
                env.config_text().unwrap(),
                text.as_bytes(),
                "{text} {args:?}: the file was touched"
            );
        }
        assert_eq!(
            names_in(&env.home.path().join("plugins")),
            Vec::<String>::new(),
            "{text}: nothing installed on a refused --enable"
        );
    }
}

// --- 9. plugins install and special files, killed installs ---------------

fn plugin_source(env: &Env, name: &str) -> PathBuf {
    write_plugin(
        env.work.path(),
        name,
        &format!("name: {name}\n"),
        &[
            ("__init__.py", "def register(ctx):\n    pass\n"),
            ("data/notes.txt", "notes\n"),
        ],
    )
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
}

fn assert_install_refused(env: &Env, src: &Path, expect: &str) {
    let o = bounded(
        env.command(&["plugins", "install", src.to_str().unwrap()]),
        PROMPT,
    );
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(err(&o).contains(expect), "{}", err(&o));
    assert_eq!(
        names_in(&env.home.path().join("plugins")),
        Vec::<String>::new(),
        "nothing left behind"
    );
}

#[test]
fn special_files_in_a_plugin_are_refused_promptly() {
    let env = env();
    let fifo_top = plugin_source(&env, "fifo-top");
    mkfifo(&fifo_top.join("pipe"));
    assert_install_refused(&env, &fifo_top, "FIFO");

    let fifo_deep = plugin_source(&env, "fifo-deep");
    mkfifo(&fifo_deep.join("data").join("pipe"));
    assert_install_refused(&env, &fifo_deep, "FIFO");

    let fifo_manifest = env.work.path().join("fifo-manifest");
    std::fs::create_dir_all(&fifo_manifest).unwrap();
    std::fs::write(fifo_manifest.join("__init__.py"), "").unwrap();
    mkfifo(&fifo_manifest.join("plugin.yaml"));
    assert_install_refused(&env, &fifo_manifest, "FIFO");

    // A link to a FIFO where the scan does not go itself (.git is not copied).
    let fifo_link = plugin_source(&env, "fifo-link");
    std::fs::create_dir_all(fifo_link.join(".git")).unwrap();
    mkfifo(&fifo_link.join(".git").join("pipe"));
    std::os::unix::fs::symlink(".git/pipe", fifo_link.join("readme.txt")).unwrap();
    assert_install_refused(&env, &fifo_link, "readme.txt is a FIFO");

    let socket = plugin_source(&env, "socket");
    let _listener = std::os::unix::net::UnixListener::bind(socket.join("sock")).unwrap();
    assert_install_refused(&env, &socket, "a socket");

    let device = plugin_source(&env, "device");
    std::os::unix::fs::symlink("/dev/zero", device.join("zeros")).unwrap();
    assert_install_refused(&env, &device, "device");

    let looped = plugin_source(&env, "looped");
    std::os::unix::fs::symlink("..", looped.join("data").join("again")).unwrap();
    assert_install_refused(&env, &looped, "loop");

    let mutual = plugin_source(&env, "mutual");
    std::fs::create_dir_all(mutual.join("b")).unwrap();
    std::os::unix::fs::symlink("../b", mutual.join("data").join("to-b")).unwrap();
    std::os::unix::fs::symlink("../data", mutual.join("b").join("to-data")).unwrap();
    assert_install_refused(&env, &mutual, "loop");
}

/// Start an install that hangs in `git clone` (its ssh transport sleeps)
/// in a process group of its own, wait for its scratch directory, and kill
/// the whole group as `kill -9` would.
fn kill_an_install_mid_clone(env: &Env) -> PathBuf {
    use std::os::unix::process::CommandExt;
    let plugins = env.home.path().join("plugins");
    let mut cmd = env.command(&["plugins", "install", "git@example.invalid:o/r.git"]);
    cmd.env("GIT_SSH_COMMAND", "sh -c 'sleep 60' --")
        .env("GIT_SSH_VARIANT", "simple")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let mut child = cmd.spawn().unwrap();
    let started = Instant::now();
    let scratch = loop {
        let found = names_in(&plugins)
            .into_iter()
            .find(|n| n.starts_with(".install-"));
        if let Some(name) = found {
            if plugins.join(&name).join("checkout").exists() {
                break plugins.join(name);
            }
        }
        assert!(
            started.elapsed() < PROMPT,
            "the install never started cloning"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let pgid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: signals the process group this test started (the install, its
    // git and the sleeping transport), nothing else.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    child.wait().unwrap();
    assert!(scratch.exists(), "the kill left the scratch clone behind");
    scratch
}

#[test]
fn a_scratch_clone_left_by_a_killed_install_is_swept_by_the_next_list_and_install() {
    let env = env();
    let scratch = kill_an_install_mid_clone(&env);
    let o = bounded(env.command(&["plugins", "list"]), LOADS);
    assert!(o.status.success(), "{}", err(&o));
    assert!(!scratch.exists(), "plugins list sweeps it");

    let scratch = kill_an_install_mid_clone(&env);
    let src = plugin_source(&env, "tidy");
    let o = bounded(
        env.command(&["plugins", "install", src.to_str().unwrap()]),
        PROMPT,
    );
    assert!(o.status.success(), "{}", err(&o));
    assert!(!scratch.exists(), "the next install sweeps it");
    assert_eq!(names_in(&env.home.path().join("plugins")), ["tidy"]);
}

#[test]
fn a_scratch_directory_of_a_running_install_is_left_alone() {
    let env = env();
    let plugins = env.home.path().join("plugins");
    // Owned by a live process (this test): not stale, whatever its age.
    let live = plugins.join(format!(".install-{}-Zz9Yy8", std::process::id()));
    std::fs::create_dir_all(live.join("checkout")).unwrap();
    // From an older plughost (no pid), a day old: stale.
    let legacy = plugins.join(".install-Qq7Ww6");
    std::fs::create_dir_all(legacy.join("checkout")).unwrap();
    let day_ago = std::time::SystemTime::now() - Duration::from_secs(24 * 3600);
    std::fs::File::open(&legacy)
        .unwrap()
        .set_modified(day_ago)
        .unwrap();
    let o = bounded(env.command(&["plugins", "list"]), LOADS);
    assert!(o.status.success(), "{}", err(&o));
    assert!(live.exists());
    assert!(!legacy.exists());
}

// --- command-line input of my commands -----------------------------------

#[test]
fn empty_names_and_homes_are_usage_errors_that_write_nothing() {
    let env = env();
    for args in [
        &["plugins", "enable", ""][..],
        &["plugins", "disable", "  "][..],
        &["--home", "", "plugins", "enable", "demo"][..],
        &["--home", "", "plugins", "list"][..],
    ] {
        let o = bounded(env.command(args), PROMPT);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", err(&o));
        let message = err(&o);
        assert!(
            message.contains("empty") || message.contains("a value is required"),
            "{args:?}: {message}"
        );
        assert!(env.config_text().is_none(), "{args:?} wrote config.json");
        assert_eq!(names_in(env.work.path()), Vec::<String>::new(), "{args:?}");
    }
}

/// A `PLUGHOST_BUNDLED_DIR` that does not exist is ignored with a warning:
/// the built-in bundled plugins (command-guard among them) still load.
#[test]
fn a_bundled_dir_override_that_does_not_exist_keeps_the_guard() {
    let started = Instant::now();
    let home = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["plugins", "list", "--json"])
        .env("PLUGHOST_HOME", home.path())
        .env("XDG_CACHE_HOME", cache.path())
        .env("PLUGHOST_BUNDLED_DIR", home.path().join("no-such-dir"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", err(&o));
    assert!(err(&o).contains("is not a directory; using the built-in bundled plugins instead"));
    let list: Value = serde_json::from_str(&out(&o)).unwrap();
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["key"] == "command-guard" && p["loaded"] == true));
    assert!(started.elapsed() < Duration::from_secs(60));
}
