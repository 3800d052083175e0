//! The bundled disk-cleanup plugin, driven through the host's real dispatch:
//! its hooks see real tool calls and its command runs through `run_command`.
//! Every host call is bounded in time (`LIMIT`), so a hang fails the test.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::common::write_plugin;
use plughost::core::hooks::{HookEvent, HookPayload, SessionContext};
use plughost::Host;
use serde_json::json;

/// The plugin reads the home through `get_flowly_home()`, one per process:
/// these tests take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The longest any one host call of these tests may take.
const LIMIT: Duration = Duration::from_secs(30);

/// Stand-ins for the agent loop's file tools, so the hook sees real calls.
/// Like the real tools, they resolve relative paths in a workspace (here
/// `<home>/workspace`, the agent's default, read from `workspace.txt` beside
/// the plugin), never in the process's working directory: that is the
/// repository when tests run, and a stray file there would get committed.
/// `write_file` is a coroutine; given `together: N` it records its start and
/// end and waits until N such calls have started, so a test can prove that
/// calls overlapped.
const FS_TOOLS: &str = r#"
import asyncio, os, subprocess, time
WORKSPACE = open(os.path.join(os.path.dirname(__file__), "workspace.txt")).read()
EVENTS = []
ARRIVED = {}
def _in_workspace(path):
    return os.path.join(WORKSPACE, path)
def register(ctx):
    async def write_file(path: str, content: str = "", together: int = 0):
        path = _in_workspace(path)
        if together:
            EVENTS.append("start " + os.path.basename(path))
            ARRIVED[together] = ARRIVED.get(together, 0) + 1
            deadline = time.monotonic() + 10
            while ARRIVED[together] < together:
                if time.monotonic() > deadline:
                    raise TimeoutError("the other calls never started")
                await asyncio.sleep(0.005)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(content)
        if together:
            EVENTS.append("end " + os.path.basename(path))
        return f"wrote {len(content)} bytes to {path}"
    def edit_file(path: str, old: str, new: str):
        path = _in_workspace(path)
        text = open(path).read()
        open(path, "w").write(text.replace(old, new))
        return "edited"
    def exec_(command: str, cwd: str = ""):
        cwd = _in_workspace(cwd) if cwd else WORKSPACE
        done = subprocess.run(command, shell=True, capture_output=True, text=True, cwd=cwd)
        return done.stdout + done.stderr
    ctx.register_tool("write_file", {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}, "together": {"type": "integer"}}, "required": ["path"]}, write_file)
    ctx.register_tool("events", {"type": "object"}, lambda: "\n".join(EVENTS))
    ctx.register_tool("edit_file", {"type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}}, edit_file)
    ctx.register_tool("exec", {"type": "object", "properties": {"command": {"type": "string"}, "cwd": {"type": "string"}}, "required": ["command"]}, exec_)
"#;

/// Fields drop in order: the host (and the records of its hooks) before
/// the temporary directories it writes into.
struct Fixture {
    host: Host,
    rt: tokio::runtime::Runtime,
    /// Where the stand-in tools resolve relative paths: `<home>/workspace`.
    workspace: PathBuf,
    tmp_root: tempfile::TempDir,
    home: tempfile::TempDir,
}

fn fixture() -> Fixture {
    fixture_with(&[])
}

/// A home with the stand-in tools and the `extra` plugins `(key, source)`
/// enabled, and the real bundled plugins.
fn fixture_with(extra: &[(&str, &str)]) -> Fixture {
    let home = tempfile::tempdir().unwrap();
    let workspace = home.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let workspace_path = workspace.to_str().expect("a UTF-8 temp path");
    write_plugin(
        &home.path().join("plugins"),
        "fs-tools",
        "name: fs-tools\n",
        &[("__init__.py", FS_TOOLS), ("workspace.txt", workspace_path)],
    );
    let mut enabled = vec!["fs-tools"];
    for (key, source) in extra {
        write_plugin(
            &home.path().join("plugins"),
            key,
            &format!("name: {key}\n"),
            &[("__init__.py", source)],
        );
        enabled.push(key);
    }
    std::fs::write(
        home.path().join("config.json"),
        json!({"plugins": {"enabled": enabled}}).to_string(),
    )
    .unwrap();
    let tmp_root = tempfile::Builder::new()
        .prefix("plughost-test-")
        .tempdir_in("/tmp")
        .unwrap();
    let bundled = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins_bundled");
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled)
        .build()
        .unwrap();
    for key in std::iter::once("disk-cleanup").chain(extra.iter().map(|(k, _)| *k)) {
        let pinned_plugins = host.plugins();
        let plugin = pinned_plugins
            .iter()
            .find(|p| p.key == key)
            .unwrap_or_else(|| panic!("plugin {key} not found"));
        assert!(plugin.loaded, "{key}: {:?}", plugin.error);
    }
    // Two workers: hooks of concurrent calls may run on different threads.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    Fixture {
        home,
        tmp_root,
        workspace,
        host,
        rt,
    }
}

impl Fixture {
    /// Run `fut` to completion, failing the test if it takes over `LIMIT`.
    fn bounded<F: Future>(&self, what: &str, fut: F) -> F::Output {
        self.rt
            .block_on(async { tokio::time::timeout(LIMIT, fut).await })
            .unwrap_or_else(|_| panic!("{what} took over {LIMIT:?}"))
    }
    fn call(&self, tool: &str, args: serde_json::Value, session: &str) -> String {
        self.bounded(tool, self.host.call_tool(tool, args, session))
            .text
    }
    fn cmd(&self, line: &str) -> String {
        self.bounded(line, self.host.run_command(line))
            .unwrap()
            .unwrap_or_default()
    }
    fn end_session(&self, session: &str) {
        let mut ctx = SessionContext {
            session_id: session.into(),
            completed: true,
            ..Default::default()
        };
        self.bounded(
            "on_session_end",
            self.host
                .fire(HookEvent::TurnClosed, HookPayload::Session(&mut ctx)),
        );
    }
    fn home(&self) -> &Path {
        self.home.path()
    }
    /// A file that was there before the turn, last changed `days` ago.
    fn users_file(&self, path: &Path, days: u64) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "the user's own work\n").unwrap();
        age(path, days);
    }
    fn hook_errors(&self) -> u64 {
        let pinned_registry = self.host.registry();
        let hooks = pinned_registry.hooks();
        [
            HookEvent::ToolGuard,
            HookEvent::ToolDone,
            HookEvent::TurnClosed,
        ]
        .iter()
        .flat_map(|e| hooks.entries(*e))
        .filter(|h| h.owner == "disk-cleanup")
        .map(|h| h.stats.errors())
        .sum()
    }
}

fn age(path: &Path, days: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(days * 86400))
        .unwrap();
}

#[test]
fn hooks_track_ephemeral_files_and_session_end_cleans_them() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixture();
    let test_file = f.home().join("work/sub/test_parser.py");
    let notes = f.home().join("work/notes.md");
    let tmp_out = f.tmp_root.path().join("out.txt");
    f.call(
        "write_file",
        json!({"path": test_file, "content": "assert True\n"}),
        "s1",
    );
    f.call(
        "write_file",
        json!({"path": notes, "content": "keep me"}),
        "s1",
    );
    f.call(
        "edit_file",
        json!({"path": notes, "old": "keep", "new": "still keep"}),
        "s1",
    );
    let echo = f.call(
        "exec",
        json!({"command": format!("echo data > {} && echo done", tmp_out.display())}),
        "s1",
    );
    assert_eq!(echo, "done\n");
    let outside = tempfile::tempdir().unwrap();
    let outside_test = outside.path().join("test_outside.py");
    f.call(
        "write_file",
        json!({"path": outside_test, "content": "x"}),
        "s1",
    );
    f.call(
        "write_file",
        json!({"path": f.home().join("other/test_other.py"), "content": "x"}),
        "s2",
    );

    let status = f.cmd("/disk-cleanup status");
    assert!(
        status.contains(&format!("[test] {}", test_file.display())),
        "{status}"
    );
    assert!(
        status.contains(&format!("[temp] {}", tmp_out.display())),
        "{status}"
    );
    assert!(!status.contains("notes.md"), "{status}");
    assert!(
        !status.contains("test_outside.py"),
        "outside the roots: {status}"
    );

    f.end_session("s1");
    assert!(!test_file.exists(), "the session's test file is deleted");
    assert!(
        !f.home().join("work/sub").exists(),
        "emptied directory removed"
    );
    assert!(
        notes.exists() && f.home().join("work").exists(),
        "other files and their directory stay"
    );
    assert!(tmp_out.exists(), "temp files wait for their age");
    assert!(outside_test.exists());
    assert!(
        f.home().join("other/test_other.py").exists(),
        "another session's files stay"
    );
    let log = std::fs::read_to_string(f.home().join("disk-cleanup/cleanup.log")).unwrap();
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains("session=s1 deleted=1"), "{log}");
    assert_eq!(f.hook_errors(), 0);
}

#[test]
fn quick_and_dry_run_agree_and_respect_ages() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixture();
    let mk = |rel: &str| {
        let p = f.home().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "x").unwrap();
        p
    };
    let test_now = mk("scratch/test_now.py");
    let old_temp = mk("scratch/old.tmp");
    let new_temp = mk("scratch/new.tmp");
    let old_cron = mk("cron/output/old.txt");
    let new_cron = mk("cron/output/new.txt");
    let empty = f.home().join("leftover/empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::create_dir_all(f.home().join("sessions")).unwrap();
    age(&old_temp, 8);
    age(&new_temp, 1);
    age(&old_cron, 15);
    age(&new_cron, 10);
    for (p, c) in [
        (&test_now, "test"),
        (&old_temp, "temp"),
        (&new_temp, "temp"),
        (&old_cron, "cron"),
        (&new_cron, "cron"),
    ] {
        let reply = f.cmd(&format!("/disk-cleanup track {} {c}", p.display()));
        assert!(reply.starts_with("Tracking"), "{reply}");
    }
    let dry = f.cmd("/disk-cleanup dry-run");
    for p in [&test_now, &old_temp, &old_cron] {
        assert!(dry.contains(&p.display().to_string()), "{dry}");
    }
    for p in [&new_temp, &new_cron] {
        assert!(!dry.contains(&p.display().to_string()), "{dry}");
    }
    assert!(dry.contains(&format!("dir  {}", empty.display())), "{dry}");
    assert!(
        !dry.contains("sessions"),
        "protected directories are never removed: {dry}"
    );
    assert!(
        test_now.exists() && old_temp.exists() && empty.exists(),
        "dry-run deletes nothing"
    );

    let quick = f.cmd("/disk-cleanup quick");
    assert!(quick.starts_with("Deleted 3 file(s)"), "{quick}");
    assert!(!test_now.exists() && !old_temp.exists() && !old_cron.exists());
    assert!(new_temp.exists() && new_cron.exists());
    assert!(!empty.exists() && !f.home().join("leftover").exists());
    assert!(
        f.home().join("sessions").exists()
            && f.home().join("plugins").exists()
            && f.home().join("config.json").exists()
    );
    let dry_after = f.cmd("/disk-cleanup dry-run");
    assert_eq!(dry_after, "Dry run: `quick` would delete nothing.");

    let forget = f.cmd(&format!("/disk-cleanup forget {}", new_temp.display()));
    assert!(forget.starts_with("Forgot"), "{forget}");
    assert!(new_temp.exists());
    assert!(!f.cmd("/disk-cleanup status").contains("new.tmp"));
    assert!(f.cmd("/disk-cleanup help").contains("dry-run"));
    assert!(f.cmd("/disk-cleanup").contains("track <path> <category>"));
    assert!(f.cmd("/disk-cleanup track /x").starts_with("Usage"));
    assert!(f
        .cmd(&format!("/disk-cleanup track {} weird", new_cron.display()))
        .starts_with("Unknown category"));
}

#[test]
fn never_outside_the_roots_through_symlinks_or_into_protected_places() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixture();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("test_victim.py");
    std::fs::write(&victim, "precious").unwrap();
    let refused = f.cmd(&format!("/disk-cleanup track {} test", victim.display()));
    assert!(refused.starts_with("Not tracked"), "{refused}");

    std::os::unix::fs::symlink(outside.path(), f.home().join("escape")).unwrap();
    let via_link = f.home().join("escape/test_victim.py");
    let refused = f.cmd(&format!("/disk-cleanup track {} test", via_link.display()));
    assert!(refused.starts_with("Not tracked"), "{refused}");
    f.call(
        "write_file",
        json!({"path": via_link, "content": "overwritten through the link"}),
        "s9",
    );

    let protected = f.home().join("plugins/fs-tools/test_keep.py");
    std::fs::write(&protected, "x").unwrap();
    assert!(f
        .cmd(&format!("/disk-cleanup track {} test", protected.display()))
        .starts_with("Not tracked"));

    // A hand-edited state file cannot smuggle them in either.
    let entry = json!({"category": "test", "session": "s9", "tracked_at": 0, "origin": "created"});
    let state = json!({"version": 2, "files": {
        victim.display().to_string(): entry,
        via_link.display().to_string(): entry,
        protected.display().to_string(): entry,
        f.home().join("config.json").display().to_string(): entry
    }});
    std::fs::create_dir_all(f.home().join("disk-cleanup")).unwrap();
    std::fs::write(
        f.home().join("disk-cleanup/tracked.json"),
        state.to_string(),
    )
    .unwrap();
    f.end_session("s9");
    f.cmd("/disk-cleanup quick");
    assert!(victim.exists(), "a file outside the roots survives");
    assert!(protected.exists() && f.home().join("config.json").exists());
    assert!(
        f.home().join("escape").exists(),
        "the symlink itself is not a target"
    );
    assert_eq!(f.hook_errors(), 0);

    // Odd parameters never raise into the host.
    f.call(
        "write_file",
        json!({"path": "relative/test_x.py", "content": ""}),
        "s9",
    );
    f.call("exec", json!({"command": "echo 'unbalanced"}), "s9");
    assert_eq!(f.hook_errors(), 0);
    assert!(
        f.workspace.join("relative/test_x.py").is_file(),
        "a relative path lands in the fixture's workspace, not the working directory"
    );
}

#[test]
fn a_corrupt_state_file_is_recovered_from_its_backup() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixture();
    let a = f.home().join("work/test_a.py");
    let b = f.home().join("work/test_b.py");
    std::fs::create_dir_all(a.parent().unwrap()).unwrap();
    std::fs::write(&a, "a").unwrap();
    std::fs::write(&b, "b").unwrap();
    f.cmd(&format!("/disk-cleanup track {} test", a.display()));
    f.cmd(&format!("/disk-cleanup track {} test", b.display()));
    let state = f.home().join("disk-cleanup/tracked.json");
    assert!(state.with_file_name("tracked.json.bak").exists());
    std::fs::write(&state, "{ not json").unwrap();
    let status = f.cmd("/disk-cleanup status");
    assert!(
        status.contains("test_a.py"),
        "recovered from the backup: {status}"
    );
    let aside: Vec<_> = std::fs::read_dir(f.home().join("disk-cleanup"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("tracked.json.corrupt-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "the corrupt file is kept aside, not lost");
    let reread: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert!(reread["files"]
        .as_object()
        .unwrap()
        .contains_key(&a.display().to_string()));
}

/// The state file's entries, as `path → entry`.
fn tracked(f: &Fixture) -> serde_json::Map<String, serde_json::Value> {
    let text = std::fs::read_to_string(f.home().join("disk-cleanup/tracked.json"))
        .unwrap_or_else(|_| r#"{"files": {}}"#.into());
    let state: serde_json::Value = serde_json::from_str(&text).unwrap();
    state["files"].as_object().cloned().unwrap_or_default()
}

#[test]
fn files_that_existed_before_the_call_survive_edits_and_rewrites() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixture();
    let edited = f.workspace.join("test_parser.py");
    let rewritten = f.workspace.join("tests/test_api.py");
    let touched = f.workspace.join("test_touched.py");
    let in_tmp = f.tmp_root.path().join("results.tmp");
    for p in [&edited, &rewritten, &touched, &in_tmp] {
        f.users_file(p, 3);
    }
    f.call(
        "edit_file",
        json!({"path": "test_parser.py", "old": "own", "new": "edited"}),
        "s1",
    );
    f.call(
        "write_file",
        json!({"path": "tests/test_api.py", "content": "rewritten\n"}),
        "s1",
    );
    f.call(
        "write_file",
        json!({"path": in_tmp, "content": "rewritten\n"}),
        "s1",
    );
    f.call("exec", json!({"command": "touch test_touched.py"}), "s1");
    assert_eq!(
        std::fs::read_to_string(&edited).unwrap(),
        "the user's edited work\n"
    );
    assert!(tracked(&f).is_empty(), "{:?}", tracked(&f));
    f.end_session("s1");
    for p in [&edited, &rewritten, &touched, &in_tmp] {
        assert!(p.exists(), "{} was the user's: it stays", p.display());
    }
    let log = std::fs::read_to_string(f.home().join("disk-cleanup/cleanup.log")).unwrap();
    assert!(log.contains("session=s1 deleted=0"), "{log}");
    assert_eq!(
        f.cmd("/disk-cleanup dry-run"),
        "Dry run: `quick` would delete nothing."
    );
    assert_eq!(f.hook_errors(), 0);
}

#[test]
fn paths_in_exec_output_are_never_tracked() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixture();
    let mine = f.workspace.join("src/test_models.py");
    let mine_too = f.home().join("notes/scratch_ideas.md");
    let in_tmp = f.tmp_root.path().join("test_data.tmp");
    for p in [&mine, &mine_too, &in_tmp] {
        f.users_file(p, 0); // changed just now: the mtime rule alone would not keep them
    }
    let listing = f.call(
        "exec",
        json!({"command": format!("find \"$PWD\" {} {} -type f", f.home().join("notes").display(), f.tmp_root.path().display())}),
        "s1",
    );
    for p in [&mine, &mine_too, &in_tmp] {
        assert!(listing.contains(&p.display().to_string()), "{listing}");
    }
    f.call("exec", json!({"command": "ls -d $PWD/src/*"}), "s1");
    assert!(tracked(&f).is_empty(), "{:?}", tracked(&f));
    f.end_session("s1");
    f.cmd("/disk-cleanup quick");
    for p in [&mine, &mine_too, &in_tmp] {
        assert!(
            p.exists(),
            "{} appeared only in output: it stays",
            p.display()
        );
    }
    assert_eq!(f.hook_errors(), 0);
}

#[test]
fn files_the_agent_creates_are_deleted_and_files_it_moves_in_are_not() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixture();
    let notes = f.workspace.join("notes.py");
    let recent = f.workspace.join("draft.py");
    let old = f.workspace.join("keep.txt");
    f.users_file(&notes, 0);
    f.users_file(&recent, 0);
    f.users_file(&old, 5);
    let out_tmp = f.tmp_root.path().join("out.txt");

    f.call(
        "write_file",
        json!({"path": "test_written.py", "content": "assert True\n"}),
        "s1",
    );
    f.call(
        "exec",
        json!({"command": "touch test_new.py && mkdir -p sub && echo x >sub/test_redirected.py"}),
        "s1",
    );
    f.call(
        "exec",
        json!({"command": format!("echo data > {}", out_tmp.display())}),
        "s1",
    );
    f.call(
        "exec",
        json!({"command": "touch test_in_cwd.py", "cwd": "sub"}),
        "s1",
    );
    // Moved, linked or copied with its old time: the user's data under a new name.
    f.call(
        "exec",
        json!({"command": "mv notes.py test_notes.py"}),
        "s1",
    );
    f.call(
        "exec",
        json!({"command": "ln draft.py test_draft.py"}),
        "s1",
    );
    f.call(
        "exec",
        json!({"command": "cp -p keep.txt test_keep.py"}),
        "s1",
    );
    // Not regular files: never tracked.
    f.call(
        "exec",
        json!({"command": "ln -s keep.txt test_link.py && mkfifo test_fifo.py && mkdir test_dir.py"}),
        "s1",
    );

    let created = [
        f.workspace.join("test_written.py"),
        f.workspace.join("test_new.py"),
        f.workspace.join("sub/test_redirected.py"),
        f.workspace.join("sub/test_in_cwd.py"),
    ];
    let status = f.cmd("/disk-cleanup status");
    for p in &created {
        assert!(
            status.contains(&format!("[test] {}", p.display())),
            "{status}"
        );
    }
    assert!(
        status.contains(&format!("[temp] {}", out_tmp.display())),
        "{status}"
    );
    assert_eq!(tracked(&f).len(), created.len() + 1, "{status}");
    assert_eq!(
        tracked(&f)[&created[0].display().to_string()]["origin"],
        "created"
    );

    f.end_session("s1");
    for p in &created {
        assert!(
            !p.exists(),
            "{} was created by the agent: deleted",
            p.display()
        );
    }
    assert!(
        !f.workspace.join("sub").exists(),
        "its emptied directory too"
    );
    for p in [
        "test_notes.py",
        "test_draft.py",
        "test_keep.py",
        "test_link.py",
        "test_fifo.py",
        "test_dir.py",
        "draft.py",
        "keep.txt",
    ] {
        assert!(
            f.workspace.join(p).exists(),
            "{p} holds the user's data: it stays"
        );
    }
    assert!(out_tmp.exists(), "temp files wait for their age");
    assert_eq!(f.hook_errors(), 0);
}

#[test]
fn concurrent_write_file_calls_of_one_turn_are_all_tracked() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixture();
    const N: usize = 8;
    let names: Vec<String> = (0..N).map(|i| format!("test_par_{i}.py")).collect();
    let results = f.bounded(
        "concurrent write_file calls",
        futures_util::future::join_all(names.iter().map(|name| {
            f.host.call_tool(
                "write_file",
                json!({"path": name, "content": "x", "together": N}),
                "s1",
            )
        })),
    );
    for r in &results {
        assert!(r.outcome.is_ok(), "{}", r.text);
    }
    // Every call started before any ended: all pre hooks ran before any post hook.
    let events = f.call("events", json!({}), "s1");
    let order: Vec<&str> = events.lines().collect();
    assert_eq!(order.len(), 2 * N, "{events}");
    assert!(
        order[..N].iter().all(|e| e.starts_with("start "))
            && order[N..].iter().all(|e| e.starts_with("end ")),
        "the calls did not overlap: {events}"
    );
    let state = tracked(&f);
    for name in &names {
        let path = f.workspace.join(name).display().to_string();
        assert_eq!(state[&path]["session"], "s1", "{path} lost: {state:?}");
    }
    f.end_session("s1");
    for name in &names {
        assert!(!f.workspace.join(name).exists());
    }
    assert_eq!(f.hook_errors(), 0);
}

/// A stand-in for a host that gives each event a context object of its
/// own: it removes what disk-cleanup keeps on the context between its pre
/// and post hooks (in both, so the order of the two plugins does not matter)
/// and counts how often it found something.
const FRESH_CONTEXTS: &str = r#"
STRIPPED = []
def register(ctx):
    def strip(c):
        if c.__dict__.pop("_disk_cleanup_snapshot", None) is not None:
            STRIPPED.append(c.tool_name)
    ctx.register_hook("pre_tool_call", strip)
    ctx.register_hook("post_tool_call", strip)
    ctx.register_tool("stripped", {"type": "object"}, lambda: str(len(STRIPPED)))
"#;

#[test]
fn without_the_context_object_a_call_id_finds_the_snapshot_and_no_id_means_keep() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixture_with(&[("fresh-contexts", FRESH_CONTEXTS)]);
    let by_id = f.bounded(
        "write_file with a call id",
        plughost::core::dispatch::call_tool(
            &f.host.registry(),
            "write_file",
            json!({"path": "test_by_id.py", "content": "x"}),
            "s1",
            "call-1",
        ),
    );
    assert!(by_id.outcome.is_ok(), "{}", by_id.text);
    f.call(
        "write_file",
        json!({"path": "test_no_id.py", "content": "x"}),
        "s1",
    );
    assert_eq!(f.call("stripped", json!({}), "s1"), "2");
    let state = tracked(&f);
    assert!(
        state.contains_key(&f.workspace.join("test_by_id.py").display().to_string()),
        "{state:?}"
    );
    assert!(
        !state.contains_key(&f.workspace.join("test_no_id.py").display().to_string()),
        "no snapshot found: not tracked: {state:?}"
    );
    assert_eq!(f.hook_errors(), 0);
}

#[test]
fn entries_of_the_old_state_format_are_held_never_deleted() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixture();
    let users = f.workspace.join("test_users.py");
    let manual = f.workspace.join("test_manual.py");
    f.users_file(&users, 0);
    f.users_file(&manual, 0);
    // Version 1: hook entries carry their session, manual ones none.
    let state = json!({"version": 1, "files": {
        users.display().to_string(): {"category": "test", "session": "s1", "tracked_at": 0},
        manual.display().to_string(): {"category": "test", "session": "", "tracked_at": 0},
    }});
    std::fs::create_dir_all(f.home().join("disk-cleanup")).unwrap();
    std::fs::write(
        f.home().join("disk-cleanup/tracked.json"),
        state.to_string(),
    )
    .unwrap();

    let status = f.cmd("/disk-cleanup status");
    assert!(
        status.contains(&format!("[test] {}  (unverified", users.display())),
        "{status}"
    );
    let dry = f.cmd("/disk-cleanup dry-run");
    assert!(
        dry.contains(&format!("file [test] {}", manual.display())),
        "{dry}"
    );
    assert!(
        dry.contains(&format!("held [test] {}", users.display())),
        "{dry}"
    );
    f.end_session("s1");
    assert!(
        users.exists(),
        "a legacy entry is not deleted at its session's end"
    );
    let quick = f.cmd("/disk-cleanup quick");
    assert!(quick.starts_with("Deleted 1 file(s)"), "{quick}");
    assert!(users.exists() && !manual.exists(), "quick holds it too");
    let saved: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(f.home().join("disk-cleanup/tracked.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(saved["version"], 2);
    assert!(saved["files"]
        .as_object()
        .unwrap()
        .contains_key(&users.display().to_string()));

    // Confirming it by hand makes it an ordinary entry.
    let reply = f.cmd(&format!("/disk-cleanup track {} test", users.display()));
    assert!(reply.starts_with("Tracking"), "{reply}");
    assert!(!f.cmd("/disk-cleanup status").contains("unverified"));
    f.cmd("/disk-cleanup quick");
    assert!(!users.exists());
    assert_eq!(f.hook_errors(), 0);
}

#[test]
fn a_huge_command_line_is_read_only_in_part_and_quickly() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixture();
    // 1 MB in one word: parsing it whole took the hook 44 s. (The shell
    // refuses an argument this long, so the stand-in tool fails: only the
    // hooks' time is measured.)
    let started = std::time::Instant::now();
    f.call(
        "exec",
        json!({"command": format!(": {}", "x".repeat(1 << 20))}),
        "s1",
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "the hooks took {took:?}");
    // What lies within the part read still counts.
    let long_tail = format!("touch test_early.py; : {}", "y".repeat(20_000));
    f.call("exec", json!({ "command": long_tail }), "s1");
    assert!(tracked(&f).contains_key(&f.workspace.join("test_early.py").display().to_string()));
    assert_eq!(f.hook_errors(), 0);
}

#[test]
fn a_state_held_by_another_process_is_waited_for_a_bounded_time_then_refused_clearly() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixture();
    std::fs::create_dir_all(f.home().join("disk-cleanup")).unwrap();
    // flock, as another plughost process on this home would hold it.
    let holder = std::fs::File::create(f.home().join("disk-cleanup/tracked.lock")).unwrap();
    holder.lock().unwrap();
    let started = std::time::Instant::now();
    let reply = f.call(
        "write_file",
        json!({"path": "test_while_locked.py", "content": "x"}),
        "s1",
    );
    assert!(
        reply.starts_with("wrote"),
        "the tool call itself goes on: {reply}"
    );
    let status = f.cmd("/disk-cleanup status");
    let took = started.elapsed();
    assert!(
        status.starts_with("disk-cleanup: ")
            && status.contains("tracked.lock stayed locked for 5 s")
            && status.ends_with("try again"),
        "{status}"
    );
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(20),
        "two bounded waits of 5 s: {took:?}"
    );
    assert_eq!(
        f.hook_errors(),
        0,
        "a held state never raises into the host"
    );

    holder.unlock().unwrap();
    f.call(
        "write_file",
        json!({"path": "test_after.py", "content": "x"}),
        "s1",
    );
    let state = tracked(&f);
    assert!(state.contains_key(&f.workspace.join("test_after.py").display().to_string()));
    assert!(
        !state.contains_key(
            &f.workspace
                .join("test_while_locked.py")
                .display()
                .to_string()
        ),
        "not tracked while locked: the file is kept"
    );
}
