//! The `plughost` command line, driven as an outside program would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{home_with, no_bundled, write_plugin};
use serde_json::Value;

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

fn env() -> Env {
    let home = home_with(&["demo"]);
    write_plugin(
        &home.path().join("plugins"),
        "demo",
        "name: demo\nversion: 0.3.0\ndescription: Demo plugin\nauthor: tests\n",
        &[
            (
                "__init__.py",
                r#"
import logging
from flowly.agent.hooks import BlockAction
log = logging.getLogger("demo.plugin")

def register(ctx):
    ctx.register_tool("greet", {"parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
                      lambda name: f"Hello, {name}!", description="Greet someone")
    ctx.register_tool("fail", {}, lambda: 1 / 0)
    ctx.register_tool("shout_log", {}, lambda: log.warning("from the plugin logger") or "logged")
    ctx.register_hook("pre_tool_call", lambda c: BlockAction("no greeting Mallory") if c.params.get("name") == "Mallory" else None)
    ctx.register_command("ping", lambda a: "pong" + (f" {a}" if a else ""), description="Round trip", args_hint="[text]")
    ctx.register_command("silent", lambda a: None)
    ctx.register_skill("howto", "SKILL.md", description="How to use demo")
    log.info("demo registered")
"#,
            ),
            ("SKILL.md", "# How to\nUse it.\n"),
        ],
    );
    write_plugin(
        &home.path().join("plugins"),
        "dormant",
        "name: dormant\n",
        &[("__init__.py", "def register(ctx):\n    pass\n")],
    );
    Env {
        home,
        bundled: no_bundled(),
    }
}

fn plughost(env: &Env, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(args)
        .env("PLUGHOST_HOME", env.home.path())
        .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
        .env_remove("PLUGHOST_LOG")
        .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn plugins_list_json_has_every_field() {
    let env = env();
    let out = plughost(&env, &["plugins", "list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let demo = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "demo")
        .unwrap();
    for field in [
        "key",
        "name",
        "version",
        "description",
        "author",
        "source",
        "kind",
        "enabled",
        "error",
        "tools",
        "hooks",
        "commands",
        "skills",
    ] {
        assert!(demo.get(field).is_some(), "missing {field}");
    }
    assert_eq!(demo["source"], "user");
    assert_eq!(demo["enabled"], true);
    assert_eq!(demo["error"], Value::Null);
    assert_eq!(demo["version"], "0.3.0");
    assert_eq!(demo["skills"], serde_json::json!(["demo:howto"]));
    let dormant = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "dormant")
        .unwrap();
    assert_eq!(dormant["enabled"], false);
    assert_eq!(
        dormant["error"],
        "not in plugins.enabled (run: plughost plugins enable dormant)"
    );

    let table = stdout(&plughost(&env, &["plugins", "list"]));
    assert!(
        table.lines().next().unwrap().starts_with("PLUGIN"),
        "{table}"
    );
    assert!(
        table.contains("demo") && table.contains("loaded"),
        "{table}"
    );
}

#[test]
fn tools_list_and_call() {
    let env = env();
    let out = plughost(&env, &["tools", "list", "--json"]);
    let tools: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let greet = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "greet")
        .unwrap();
    assert_eq!(greet["description"], "Greet someone");
    assert_eq!(greet["plugin"], "demo");
    assert_eq!(
        greet["parameters"]["required"],
        serde_json::json!(["name"]),
        "the unwrapped schema"
    );

    let ok = plughost(
        &env,
        &["tools", "call", "greet", "--args", r#"{"name": "Ada"}"#],
    );
    assert_eq!(stdout(&ok), "Hello, Ada!\n");
    assert_eq!(ok.status.code(), Some(0));
    let blocked = plughost(
        &env,
        &["tools", "call", "greet", "--args", r#"{"name": "Mallory"}"#],
    );
    assert_eq!(stdout(&blocked), "[blocked: no greeting Mallory]\n");
    assert_eq!(blocked.status.code(), Some(1));
    let failed = plughost(&env, &["tools", "call", "fail"]);
    assert_eq!(stdout(&failed), "Error executing fail: division by zero\n");
    assert_eq!(failed.status.code(), Some(1));
    let missing = plughost(&env, &["tools", "call", "nope"]);
    assert_eq!(stdout(&missing), "Error: Tool 'nope' not found\n");
    assert_eq!(missing.status.code(), Some(1));
    let malformed = plughost(&env, &["tools", "call", "greet", "--args", "{name: Ada}"]);
    assert_eq!(malformed.status.code(), Some(2));
    assert!(
        stderr(&malformed).contains("--args is not valid JSON"),
        "{}",
        stderr(&malformed)
    );
    assert!(stdout(&malformed).is_empty());
    let not_object = plughost(&env, &["tools", "call", "greet", "--args", "[1]"]);
    assert_eq!(not_object.status.code(), Some(2));
}

#[test]
fn python_logging_reaches_stderr() {
    let env = env();
    let out = plughost(&env, &["tools", "call", "shout_log"]);
    assert_eq!(stdout(&out), "logged\n");
    assert!(
        stderr(&out).contains("from the plugin logger"),
        "{}",
        stderr(&out)
    );
    assert!(
        !stderr(&out).contains("demo registered"),
        "info is hidden without -v"
    );
    let verbose = plughost(&env, &["-v", "plugins", "list"]);
    assert!(
        stderr(&verbose).contains("demo registered"),
        "{}",
        stderr(&verbose)
    );
}

#[test]
fn commands_list_and_run() {
    let env = env();
    let out = plughost(&env, &["commands", "run", "/ping hi"]);
    assert_eq!(stdout(&out), "pong hi\n");
    let silent = plughost(&env, &["commands", "run", "/silent"]);
    assert!(silent.status.success());
    assert_eq!(stdout(&silent), "");
    let help = stdout(&plughost(&env, &["commands", "run", "/help"]));
    assert!(help.contains("/ping [text] — Round trip"), "{help}");
    assert!(help.contains("/silent"), "{help}");
    let list = stdout(&plughost(&env, &["commands", "list"]));
    assert!(list.contains("/ping"), "{list}");
    let unknown = plughost(&env, &["commands", "run", "/nope"]);
    assert_ne!(unknown.status.code(), Some(0));
    assert!(stderr(&unknown).contains("/help"), "{}", stderr(&unknown));
}

#[test]
fn skills_list_and_view() {
    let env = env();
    assert!(stdout(&plughost(&env, &["skills", "list"])).contains("demo:howto"));
    let view = plughost(&env, &["skills", "view", "demo:howto"]);
    assert_eq!(stdout(&view), "# How to\nUse it.\n");
    let unknown = plughost(&env, &["skills", "view", "demo:nope"]);
    assert_ne!(unknown.status.code(), Some(0));
    assert!(
        stderr(&unknown).contains("unknown skill"),
        "{}",
        stderr(&unknown)
    );
}

#[test]
fn enable_and_disable_edit_config() {
    let env = env();
    let config = env.home.path().join("config.json");
    std::fs::write(
        &config,
        r#"{"theme": "dark", "plugins": {"enabled": ["demo"], "disabled": []}}"#,
    )
    .unwrap();
    let out = plughost(&env, &["plugins", "enable", "dormant"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("Restart plughost for changes to apply."));
    let out = plughost(&env, &["plugins", "disable", "demo"]);
    assert!(stdout(&out).contains("Restart plughost for changes to apply."));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(doc["theme"], "dark");
    assert_eq!(doc["plugins"]["enabled"], serde_json::json!(["dormant"]));
    assert_eq!(doc["plugins"]["disabled"], serde_json::json!(["demo"]));
    let list: Value =
        serde_json::from_str(&stdout(&plughost(&env, &["plugins", "list", "--json"]))).unwrap();
    let demo = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "demo")
        .unwrap();
    assert_eq!(demo["error"], "disabled in config");

    std::fs::write(&config, "{broken").unwrap();
    let out = plughost(&env, &["plugins", "enable", "demo"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("config.json is not valid JSON"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "{broken");
}

#[test]
fn home_flag_overrides_env_and_version_prints() {
    let env = env();
    let other = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args([
            "--home",
            other.path().to_str().unwrap(),
            "plugins",
            "list",
            "--json",
        ])
        .env("PLUGHOST_HOME", env.home.path())
        .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
        .output()
        .unwrap();
    assert_eq!(stdout(&out).trim(), "[]");
    let v = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(stdout(&v).starts_with("plughost "));
}

#[test]
fn the_built_in_bundled_plugin_loads_from_the_binary() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["plugins", "list", "--json"])
        .env("PLUGHOST_HOME", home.path())
        .env_remove("PLUGHOST_BUNDLED_DIR")
        .env_remove("XDG_CACHE_HOME")
        .current_dir(Path::new("/"))
        .output()
        .unwrap();
    let list: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let audit = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "tool-audit")
        .expect("bundled plugin listed");
    assert_eq!(audit["source"], "bundled");
    assert_eq!(audit["enabled"], true);
    assert_eq!(audit["error"], Value::Null);
    let call = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["tools", "call", "audit_summary"])
        .env("PLUGHOST_HOME", home.path())
        .env_remove("PLUGHOST_BUNDLED_DIR")
        .env_remove("XDG_CACHE_HOME")
        .output()
        .unwrap();
    assert_eq!(stdout(&call), "No tool calls recorded yet.\n");
}

#[test]
fn project_plugins_load_only_when_enabled_by_env_and_config() {
    let env = env();
    let project = tempfile::tempdir().unwrap();
    write_plugin(
        &project.path().join(".plughost/plugins"),
        "proj",
        "name: proj\n",
        &[("__init__.py", "def register(ctx):\n    ctx.register_tool('from_project', {}, lambda: 'project tool')\n")],
    );
    let run = |enable_env: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(["tools", "call", "from_project"])
            .current_dir(project.path())
            .env("PLUGHOST_HOME", env.home.path())
            .env("PLUGHOST_BUNDLED_DIR", env.bundled.path());
        match enable_env {
            Some(v) => cmd.env("PLUGHOST_ENABLE_PROJECT_PLUGINS", v),
            None => cmd.env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS"),
        };
        stdout(&cmd.output().unwrap())
    };
    assert_eq!(run(None), "Error: Tool 'from_project' not found\n");
    assert_eq!(
        run(Some("yes")),
        "Error: Tool 'from_project' not found\n",
        "still opt-in"
    );
    plughost(&env, &["plugins", "enable", "proj", "--force"]);
    assert_eq!(run(Some("yes")), "project tool\n");
    assert_eq!(run(Some("0")), "Error: Tool 'from_project' not found\n");
}

#[test]
fn a_real_flowly_installation_is_used_instead_of_the_compat_modules() {
    let env = env();
    let site = tempfile::tempdir().unwrap();
    let hooks = r#"
class _Base:
    def __init__(self, *args, **kwargs):
        names = ["session_id", "task_id", "tool_name", "params", "tool_call_id", "result", "duration_ms", "success"]
        for name, value in zip(names, args):
            setattr(self, name, value)
        for name, value in kwargs.items():
            setattr(self, name, value)
class BlockAction:
    def __init__(self, message): self.message = message
class SkipAction:
    def __init__(self, reason=""): self.reason = reason
class RewriteAction:
    def __init__(self, text): self.text = text
class HookContext(_Base): pass
class ToolHookContext(HookContext): REAL = "real flowly"
class LLMHookContext(HookContext): pass
class SessionHookContext(HookContext): pass
class SubagentStopContext(HookContext): pass
class GatewayDispatchContext(HookContext): pass
VALID_EVENTS = set()
"#;
    let pkg = site.path().join("flowly");
    std::fs::create_dir_all(pkg.join("agent")).unwrap();
    std::fs::write(pkg.join("__init__.py"), "REAL = True\n").unwrap();
    std::fs::write(pkg.join("agent/__init__.py"), "").unwrap();
    std::fs::write(pkg.join("agent/hooks.py"), hooks).unwrap();
    write_plugin(
        &env.home.path().join("plugins"),
        "probe",
        "name: probe\n",
        &[(
            "__init__.py",
            "import flowly\nSEEN = []\ndef register(ctx):\n    ctx.register_hook('pre_tool_call', lambda c: SEEN.append(type(c).REAL))\n    ctx.register_tool('which', {}, lambda: f'{getattr(flowly, \"REAL\", False)} {SEEN}')\n",
        )],
    );
    let config = env.home.path().join("config.json");
    std::fs::write(&config, r#"{"plugins": {"enabled": ["demo", "probe"]}}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["tools", "call", "which"])
        .env("PLUGHOST_HOME", env.home.path())
        .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
        .env("PYTHONPATH", site.path())
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "True ['real flowly']\n", "{}", stderr(&out));
}

#[test]
fn run_and_chat_drive_the_agent_loop_with_the_shipped_demo_script() {
    let home = tempfile::tempdir().unwrap();
    let bundled = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins_bundled");
    let run = |args: &[&str], stdin: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
            .args(args)
            .env("PLUGHOST_HOME", home.path())
            .env("PLUGHOST_BUNDLED_DIR", &bundled)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run(&["run", "hello"], "");
    assert!(out.status.success(), "{}", stderr(&out));
    let reply = stdout(&out);
    assert!(
        reply.starts_with(
            "Results: hello from plughost | [blocked: command-guard refused 'rm -rf / --preserve-root'"
        ),
        "{reply}"
    );
    assert!(
        !home.path().join("workspace/test_hello.py").exists(),
        "disk-cleanup removed the demo's test script at session end"
    );
    let log = std::fs::read_to_string(home.path().join("disk-cleanup/cleanup.log")).unwrap();
    assert!(log.contains("session=default deleted=1"), "{log}");

    let json = run(&["run", "--json", "--session", "j", "hello"], "");
    let report: Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(report["session_key"], "j");
    assert_eq!(report["iterations"], 3);
    assert_eq!(report["tool_calls"][2]["outcome"], "blocked");
    assert!(report["timings"]["total_ms"].as_f64().unwrap() > 0.0);
    assert!(home.path().join("sessions/j.jsonl").is_file());

    // The audit trail's last two records are session j's turn: write_file
    // (iteration 1), then the exec that ran (iteration 2). The exec that
    // command-guard blocked never ran, so no post_tool_call recorded it.
    let command = run(&["run", "/audit recent 2"], "");
    let recent: Vec<Vec<String>> = stdout(&command)
        .lines()
        .map(|l| l.split("  ").skip(1).take(2).map(str::to_string).collect())
        .collect();
    assert_eq!(
        recent,
        [["write_file", "ok"], ["exec", "ok"]],
        "{}",
        stdout(&command)
    );

    let chat = run(&["chat", "--session", "c"], "hello\n/plugins\n");
    let text = stdout(&chat);
    assert!(chat.status.success(), "{}", stderr(&chat));
    assert!(
        text.contains("⚙ write_file"),
        "tool calls are shown as they happen: {text}"
    );
    assert!(text.contains("✗ exec → [blocked: command-guard"), "{text}");
    assert!(text.contains("✓ command-guard (bundled)"), "{text}");

    let bad_model = run(&["run", "--model", "nosuch:thing", "hi"], "");
    assert_eq!(bad_model.status.code(), Some(2));
    assert!(
        stderr(&bad_model).contains("unknown model provider 'nosuch'"),
        "{}",
        stderr(&bad_model)
    );
    let script = home.path().join("script.yaml");
    std::fs::write(&script, "turns:\n  - say: \"scripted {user_message}\"\n").unwrap();
    let custom = run(
        &[
            "run",
            "--script",
            script.to_str().unwrap(),
            "--session",
            "x",
            "ping",
        ],
        "",
    );
    assert_eq!(stdout(&custom), "scripted ping\n");
}

// --- newcomer experience: suggestions, stray entries, built-ins, output ---

fn config_of(env: &Env) -> Value {
    serde_json::from_str(&std::fs::read_to_string(env.home.path().join("config.json")).unwrap())
        .unwrap()
}

#[test]
fn enabling_a_name_not_installed_fails_with_a_suggestion_unless_forced() {
    let env = env();
    let typo = plughost(&env, &["plugins", "enable", "dem"]);
    assert_eq!(typo.status.code(), Some(1), "{}", stderr(&typo));
    assert!(
        stderr(&typo).contains("no plugin named 'dem' is installed (did you mean 'demo'?)"),
        "{}",
        stderr(&typo)
    );
    assert!(stderr(&typo).contains("--force"), "{}", stderr(&typo));
    assert_eq!(
        config_of(&env)["plugins"]["enabled"],
        serde_json::json!(["demo"]),
        "nothing recorded"
    );

    let forced = plughost(&env, &["plugins", "enable", "dem", "--force"]);
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert_eq!(
        config_of(&env)["plugins"]["enabled"],
        serde_json::json!(["demo", "dem"])
    );
    let list = plughost(&env, &["plugins", "list"]);
    assert!(
        stderr(&list).contains("config.json names plugins that are not installed: dem"),
        "{}",
        stderr(&list)
    );

    let absent = plughost(&env, &["plugins", "forget", "nothere"]);
    assert_eq!(absent.status.code(), Some(1));
    assert!(
        stderr(&absent).contains("'nothere' is in neither plugins.enabled nor plugins.disabled"),
        "{}",
        stderr(&absent)
    );
    let nothing = plughost(&env, &["plugins", "forget"]);
    assert_eq!(nothing.status.code(), Some(2));
    let forgot = plughost(&env, &["plugins", "forget", "--stray"]);
    assert!(forgot.status.success(), "{}", stderr(&forgot));
    assert_eq!(
        stdout(&forgot),
        format!(
            "Forgot dem.\n{}\n",
            "Restart plughost for changes to apply."
        )
    );
    assert_eq!(
        config_of(&env)["plugins"]["enabled"],
        serde_json::json!(["demo"]),
        "demo kept"
    );
    assert_eq!(
        stdout(&plughost(&env, &["plugins", "forget", "--stray"])),
        "No stray entries in config.json.\n"
    );
}

#[test]
fn unknown_tools_commands_and_skills_get_the_closest_names() {
    let env = env();
    let tool = plughost(&env, &["tools", "call", "gret"]);
    assert_eq!(
        stdout(&tool),
        "Error: Tool 'gret' not found\n",
        "the result string is a contract"
    );
    assert_eq!(tool.status.code(), Some(1));
    assert!(
        stderr(&tool).contains("no tool named 'gret' (did you mean 'greet'?)"),
        "{}",
        stderr(&tool)
    );
    let command = plughost(&env, &["commands", "run", "/pnig"]);
    assert_eq!(command.status.code(), Some(1));
    assert!(
        stderr(&command).contains("unknown command '/pnig' (did you mean '/ping'?)"),
        "{}",
        stderr(&command)
    );
    let skill = plughost(&env, &["skills", "view", "demo:howt"]);
    assert_eq!(skill.status.code(), Some(1));
    assert!(
        stderr(&skill).contains("did you mean 'demo:howto'?"),
        "{}",
        stderr(&skill)
    );
    let stranger = plughost(&env, &["tools", "call", "zzzzzz"]);
    assert!(
        !stderr(&stranger).contains("did you mean"),
        "{}",
        stderr(&stranger)
    );
}

#[test]
fn a_failed_plugins_skill_and_install_enable_say_the_plugin_failed_and_why() {
    let env = env();
    let source = tempfile::tempdir().unwrap();
    let broken = write_plugin(
        source.path(),
        "broken",
        "name: broken\n",
        &[
            ("__init__.py", "def register(ctx):\n    ctx.register_skill('guide', 'SKILL.md')\n    raise RuntimeError('no config for broken')\n"),
            ("SKILL.md", "# Guide\n"),
        ],
    );
    let install = plughost(
        &env,
        &["plugins", "install", broken.to_str().unwrap(), "--enable"],
    );
    assert_eq!(install.status.code(), Some(1), "{}", stdout(&install));
    let why = stderr(&install);
    assert!(
        why.contains(
            "plugin 'broken' was installed but fails to load: RuntimeError: no config for broken"
        ),
        "{why}"
    );
    assert!(
        why.contains("__init__.py:3") && why.contains("Traceback"),
        "{why}"
    );
    assert!(
        why.contains("It was not enabled; fix it, then run: plughost plugins enable broken"),
        "{why}"
    );
    assert_eq!(
        config_of(&env)["plugins"]["enabled"],
        serde_json::json!(["demo"])
    );
    assert!(
        env.home.path().join("plugins/broken/__init__.py").is_file(),
        "left installed"
    );

    // Enabled anyway (--force: it is refused otherwise, as it fails to
    // load), its skill is unavailable, and says why.
    assert!(plughost(&env, &["plugins", "enable", "broken", "--force"])
        .status
        .success());
    let skill = plughost(&env, &["skills", "view", "broken:guide"]);
    assert_eq!(skill.status.code(), Some(1));
    assert!(
        stderr(&skill).contains("skill 'broken:guide' is unavailable: its plugin 'broken' failed to load: RuntimeError: no config for broken"),
        "{}",
        stderr(&skill)
    );
    let dormant = plughost(&env, &["skills", "view", "dormant:x"]);
    assert!(
        stderr(&dormant).contains("its plugin 'dormant' is not loaded"),
        "{}",
        stderr(&dormant)
    );
}

#[test]
fn built_in_tools_are_listed_and_run_confined_to_the_workspace() {
    let env = env();
    let workspace = tempfile::tempdir().unwrap();
    let ws = workspace.path().to_str().unwrap();
    let list = plughost(&env, &["tools", "list", "--json", "--workspace", ws]);
    let tools: Value = serde_json::from_str(&stdout(&list)).unwrap();
    for name in ["read_file", "write_file", "edit_file", "list_dir", "exec"] {
        let tool = tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed"));
        assert_eq!(tool["plugin"], "builtin", "{tool}");
    }
    let table = stdout(&plughost(&env, &["tools", "list"]));
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("read_file ") && l.contains(" builtin ")),
        "{table}"
    );
    let write = plughost(
        &env,
        &[
            "tools",
            "call",
            "write_file",
            "--workspace",
            ws,
            "--args",
            r#"{"path": "a.txt", "content": "hi"}"#,
        ],
    );
    assert!(write.status.success(), "{}", stdout(&write));
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("a.txt")).unwrap(),
        "hi"
    );
    let read = plughost(
        &env,
        &[
            "tools",
            "call",
            "read_file",
            "--workspace",
            ws,
            "--args",
            r#"{"path": "a.txt"}"#,
        ],
    );
    assert_eq!(stdout(&read), "hi\n");
    let escape = plughost(
        &env,
        &[
            "tools",
            "call",
            "read_file",
            "--workspace",
            ws,
            "--args",
            r#"{"path": "/etc/hostname"}"#,
        ],
    );
    assert_eq!(escape.status.code(), Some(1));
    assert!(
        stdout(&escape).contains("is outside the workspace"),
        "{}",
        stdout(&escape)
    );
}

#[test]
fn run_shows_tool_calls_on_stderr_and_fills_placeholders_in_arguments() {
    let env = env();
    let workspace = tempfile::tempdir().unwrap();
    let script = env.home.path().join("note.yaml");
    std::fs::write(
        &script,
        "turns:\n  - tool_calls:\n      - name: write_file\n        args: {path: \"{user_message}.txt\", content: \"for {user_message}\"}\n  - say: \"see {home}/notes\"\n",
    )
    .unwrap();
    let args = [
        "run",
        "--script",
        script.to_str().unwrap(),
        "--workspace",
        workspace.path().to_str().unwrap(),
        "memo",
    ];
    let out = plughost(&env, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let home = env.home.path().display().to_string();
    assert_eq!(
        stdout(&out),
        format!("see {home}/notes\n"),
        "only the reply, real paths"
    );
    let shown = stderr(&out);
    let started = shown
        .find("⚙ write_file {\"path\":\"memo.txt\"")
        .expect("the call is shown");
    let finished = shown
        .find("✓ write_file → Wrote")
        .expect("its outcome is shown");
    assert!(started < finished, "{shown}");
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("memo.txt")).unwrap(),
        "for memo"
    );

    let mut json_args = args.to_vec();
    json_args.insert(1, "--json");
    json_args.push("--session");
    json_args.push("other");
    let json = plughost(&env, &json_args);
    let report: Value =
        serde_json::from_str(&stdout(&json)).expect("--json prints only the report");
    assert_eq!(report["tool_calls"][0]["name"], "write_file");
    assert!(!stderr(&json).contains('⚙'), "{}", stderr(&json));
}

#[test]
fn chat_banner_names_the_script_file() {
    let env = env();
    let script = env.home.path().join("mine.yaml");
    std::fs::write(&script, "turns:\n  - say: hi\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["chat", "--script", script.to_str().unwrap()])
        .env("PLUGHOST_HOME", env.home.path())
        .env("PLUGHOST_BUNDLED_DIR", env.bundled.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains(&format!("model scripted:{}", script.display())),
        "{}",
        stdout(&out)
    );
}

#[test]
fn logs_have_no_colour_off_a_terminal_and_no_field_noise_unless_verbose() {
    let env = env();
    let quiet = plughost(&env, &["tools", "call", "shout_log"]);
    let text = stderr(&quiet);
    assert!(text.contains("from the plugin logger"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "no colour codes into a pipe: {text:?}"
    );
    assert!(!text.contains("logger="), "{text}");
    let verbose = plughost(&env, &["-v", "tools", "call", "shout_log"]);
    assert!(
        stderr(&verbose).contains("logger=\"demo.plugin\""),
        "{}",
        stderr(&verbose)
    );
}

#[test]
fn a_failed_model_call_goes_to_stderr_with_its_cause() {
    let env = env();
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = plughost(
        &env,
        &[
            "run",
            "--model",
            "openai:x",
            "--base-url",
            &format!("http://127.0.0.1:{port}"),
            "hi",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "", "errors are not replies");
    let text = stderr(&out);
    assert!(
        text.contains("plughost: model call failed: network error talking to"),
        "{text}"
    );
    assert!(
        text.to_lowercase().contains("connection refused"),
        "the cause is shown: {text}"
    );
}

/// `/plugins doctor` in a chat: doctor's report with the hook call counts
/// of this process, so the turns just run show in them.
#[test]
fn plugins_doctor_in_chat_counts_the_sessions_hook_calls() {
    let home = tempfile::tempdir().unwrap();
    let bundled = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins_bundled");
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["chat", "--session", "d"])
        .env("PLUGHOST_HOME", home.path())
        .env("PLUGHOST_BUNDLED_DIR", &bundled)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"/plugins doctor\nhello\n/plugins doctor\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // command-guard's pre_tool_call ran on the demo's two `exec` calls (one
    // blocked) between the two reports: it declares its shell tools, so its
    // hook is not called for the `write_file` call.
    let reports: Vec<&str> = text.split("home: ").skip(1).collect();
    assert_eq!(reports.len(), 2, "{text}");
    let guard_line = |report: &str| -> String {
        report
            .lines()
            .skip_while(|l| !l.starts_with("command-guard ["))
            .find(|l| l.trim_start().starts_with("hook calls: "))
            .unwrap_or_else(|| panic!("{report}"))
            .to_string()
    };
    assert!(
        guard_line(reports[0]).contains("pre_tool_call 0"),
        "{}",
        reports[0]
    );
    assert!(
        guard_line(reports[1]).contains("pre_tool_call 2"),
        "{}",
        reports[1]
    );
}
