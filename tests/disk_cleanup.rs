//! The bundled disk-cleanup plugin, driven through the host's real dispatch:
//! its hooks see real tool calls and its command runs through `run_command`.
mod common;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use common::write_plugin;
use plughost::hooks::{HookEvent, HookPayload, SessionContext};
use plughost::Host;
use serde_json::json;

/// The plugin reads the home through `get_flowly_home()`, one per process:
/// these tests take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Stand-ins for the agent loop's file tools, so the hook sees real calls.
/// Like the real tools, they resolve relative paths in a workspace (here a
/// temporary directory of the fixture, read from `workspace.txt` beside the
/// plugin), never in the process's working directory: that is the
/// repository when tests run, and a stray file there would get committed.
const FS_TOOLS: &str = r#"
import os, subprocess
WORKSPACE = open(os.path.join(os.path.dirname(__file__), "workspace.txt")).read()
def _in_workspace(path):
    return os.path.join(WORKSPACE, path)
def register(ctx):
    def write_file(path: str, content: str = ""):
        path = _in_workspace(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(content)
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
    ctx.register_tool("write_file", {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path"]}, write_file)
    ctx.register_tool("edit_file", {"type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}}, edit_file)
    ctx.register_tool("exec", {"type": "object", "properties": {"command": {"type": "string"}, "cwd": {"type": "string"}}, "required": ["command"]}, exec_)
"#;

struct Fixture {
    home: tempfile::TempDir,
    tmp_root: tempfile::TempDir,
    /// Where the stand-in tools resolve relative paths.
    workspace: tempfile::TempDir,
    host: Host,
    rt: tokio::runtime::Runtime,
}

fn fixture() -> Fixture {
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let workspace_path = workspace.path().to_str().expect("a UTF-8 temp path");
    write_plugin(
        &home.path().join("plugins"),
        "fs-tools",
        "name: fs-tools\n",
        &[("__init__.py", FS_TOOLS), ("workspace.txt", workspace_path)],
    );
    std::fs::write(
        home.path().join("config.json"),
        r#"{"plugins": {"enabled": ["fs-tools"]}}"#,
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
    let dc = host
        .plugins()
        .iter()
        .find(|p| p.key == "disk-cleanup")
        .expect("bundled disk-cleanup");
    assert!(dc.loaded, "{:?}", dc.error);
    let rt = tokio::runtime::Builder::new_current_thread()
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
    fn call(&self, tool: &str, args: serde_json::Value, session: &str) -> String {
        self.rt
            .block_on(self.host.call_tool(tool, args, session))
            .text
    }
    fn cmd(&self, line: &str) -> String {
        self.rt
            .block_on(self.host.run_command(line))
            .unwrap()
            .unwrap_or_default()
    }
    fn end_session(&self, session: &str) {
        let mut ctx = SessionContext {
            session_id: session.into(),
            completed: true,
            ..Default::default()
        };
        self.rt.block_on(
            self.host
                .fire(HookEvent::OnSessionEnd, HookPayload::Session(&mut ctx)),
        );
    }
    fn home(&self) -> &Path {
        self.home.path()
    }
    fn hook_errors(&self) -> u64 {
        let hooks = self.host.registry().hooks();
        [HookEvent::PostToolCall, HookEvent::OnSessionEnd]
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
    let state = json!({"version": 1, "files": {
        victim.display().to_string(): {"category": "test", "session": "s9", "tracked_at": 0},
        via_link.display().to_string(): {"category": "test", "session": "s9", "tracked_at": 0},
        protected.display().to_string(): {"category": "test", "session": "s9", "tracked_at": 0},
        f.home().join("config.json").display().to_string(): {"category": "test", "session": "s9", "tracked_at": 0}
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
        f.workspace.path().join("relative/test_x.py").is_file(),
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
