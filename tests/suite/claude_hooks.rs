//! Claude Code plugins' command hooks (issue 48, item 1): a plugin in
//! Claude Code's layout whose `hooks/hooks.json` guards `Bash` with a
//! script that exits 2, checks after it (PostToolUse), adds context to the
//! prompt (UserPromptSubmit) and the session (SessionStart), records the
//! Stop event, and has hooks that hang, print bad JSON and exit 1: run on
//! an agent turn with the scripted model and the built-in tools.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::tools::{agent_tools, DelegateSlot, Workspace};
use plughost::agent::{Agent, AgentConfig, Inbound, TurnReport};
use plughost::{Host, ToolOutcome};
use serde_json::{json, Value};

const GUARD: &str = r#"input=$(cat)
case "$input" in
  *'rm -rf'*) echo "guarded: recursive rm is not allowed here" >&2; exit 2 ;;
esac
printf '%s\n' "$input" >> "$CLAUDE_PLUGIN_DATA/pre.jsonl"
exit 0
"#;

const POST: &str = r#"cat > "$CLAUDE_PLUGIN_DATA/post.json"
echo '{"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "post-check: output looked fine"}}'
"#;

const PROMPT: &str = r#"input=$(cat)
case "$input" in
  *forbidden*) echo '{"decision": "block", "reason": "that topic is off limits"}'; exit 0 ;;
esac
echo "Prompt context: the project codename is Zebra."
"#;

/// The plugin `guarded` at `dir`.
pub fn write_guarded(dir: &Path) {
    for d in [".claude-plugin", "hooks"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(
        dir.join(".claude-plugin/plugin.json"),
        json!({"name": "guarded", "version": "1.0.0", "description": "hooks"}).to_string(),
    )
    .unwrap();
    let cmd = |c: &str| json!({"type": "command", "command": c});
    let hooks = json!({"description": "test hooks", "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [cmd("sh \"${CLAUDE_PLUGIN_ROOT}/hooks/guard.sh\"")]},
            {"matcher": "Read", "hooks": [{"type": "command", "command": "sleep 30", "timeout": 1}]},
            {"matcher": "Write", "hooks": [cmd("echo '{not json'")]},
            {"matcher": "LS", "hooks": [cmd("echo broken >&2; exit 1")]}
        ],
        "PostToolUse": [{"matcher": "Bash", "hooks": [cmd("sh \"$CLAUDE_PLUGIN_ROOT/hooks/post.sh\"")]}],
        "UserPromptSubmit": [{"hooks": [cmd("sh \"${CLAUDE_PLUGIN_ROOT}/hooks/prompt.sh\"")]}],
        "SessionStart": [{"matcher": "startup", "hooks": [cmd("echo 'Session context: be brief.'")]}],
        "Stop": [{"hooks": [cmd("cat > \"$CLAUDE_PLUGIN_DATA/stop.json\"")]}],
        "Notification": [{"hooks": [cmd("true")]}]
    }});
    std::fs::write(dir.join("hooks/hooks.json"), hooks.to_string()).unwrap();
    std::fs::write(dir.join("hooks/guard.sh"), GUARD).unwrap();
    std::fs::write(dir.join("hooks/post.sh"), POST).unwrap();
    std::fs::write(dir.join("hooks/prompt.sh"), PROMPT).unwrap();
}

/// A plugin's key and the function that writes it into a directory.
pub type Writer<'a> = (&'a str, fn(&Path));

pub struct Fixture {
    pub home: tempfile::TempDir,
    _bundled: tempfile::TempDir,
    pub host: Arc<Host>,
    pub rt: tokio::runtime::Runtime,
    slot: DelegateSlot,
}

impl Fixture {
    /// A host with `plugins` written into its plugin directory and
    /// enabled, and the built-in tools (`delegate` included).
    pub fn new(write: &[Writer<'_>]) -> Fixture {
        Fixture::with_config(write, json!({}))
    }

    /// [`Fixture::new`] with `plugins` of `config.json` holding `extra` too.
    pub fn with_config(write: &[Writer<'_>], extra: Value) -> Fixture {
        let home = tempfile::tempdir().unwrap();
        let bundled = tempfile::tempdir().unwrap();
        for (key, w) in write {
            w(&home.path().join("plugins").join(key));
        }
        let keys: Vec<&str> = write.iter().map(|(k, _)| *k).collect();
        let mut plugins = json!({"enabled": keys});
        for (k, v) in extra.as_object().into_iter().flatten() {
            plugins[k] = v.clone();
        }
        std::fs::write(
            home.path().join("config.json"),
            json!({ "plugins": plugins }).to_string(),
        )
        .unwrap();
        let ws = Workspace::new(&home.path().join("workspace")).unwrap();
        let slot = DelegateSlot::default();
        let mut builder = crate::common::builder()
            .home(home.path())
            .bundled_dir(bundled.path());
        for tool in agent_tools(&ws, home.path(), &slot) {
            builder = builder.tool(tool);
        }
        let host = Arc::new(builder.build().unwrap());
        for p in host.plugins().iter() {
            assert!(p.loaded, "{}: {:?}", p.key, p.error);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        Fixture {
            home,
            _bundled: bundled,
            host,
            rt,
            slot,
        }
    }

    pub fn agent(&self, script: &str) -> Agent {
        let provider = Arc::new(Scripted::new(Script::parse(script, "t.yaml").unwrap()));
        self.agent_with(provider)
    }

    pub fn agent_with(&self, provider: Arc<dyn plughost::agent::provider::Provider>) -> Agent {
        let _g = self.rt.enter();
        Agent::new(
            Arc::clone(&self.host),
            provider,
            AgentConfig::default(),
            Some(&self.slot),
        )
    }

    pub fn turn(&self, agent: &Agent, session: &str, text: &str) -> TurnReport {
        self.rt
            .block_on(agent.send(Inbound::new(session, text), None))
    }

    pub fn data(&self, key: &str) -> std::path::PathBuf {
        self.home.path().join("plugin-data").join(key)
    }
}

/// Every message the model was sent in the turn's calls, joined: what
/// reached the model, whether it joined the transcript (in-process) or
/// each call's in-flight list (a worker's SessionStart context).
fn sent_to_model(report: &TurnReport) -> String {
    report
        .model_calls
        .iter()
        .flat_map(|call| call.sent_messages())
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

const EXEC_TWICE: &str = r#"
turns:
  - tool_calls:
      - name: exec
        args: {command: "rm -rf build"}
      - name: exec
        args: {command: "echo hi"}
  - say: "{tool_results}"
"#;

#[test]
fn a_pre_tool_use_guard_exiting_2_blocks_bash_with_its_stderr_and_the_rest_run() {
    let f = Fixture::new(&[("guarded", write_guarded)]);
    let agent = f.agent(EXEC_TWICE);
    let report = f.turn(&agent, "s1", "clean up");
    assert!(report.completed, "{:?}", report.error);
    let calls = &report.tool_calls;
    assert_eq!(calls.len(), 2, "{calls:?}");
    // The guard's exit 2: a blocked call whose result is its stderr.
    assert!(
        matches!(&calls[0].outcome, ToolOutcome::Blocked { message } if message.contains("recursive rm")),
        "{calls:?}"
    );
    assert!(
        calls[0]
            .result
            .contains("guarded: recursive rm is not allowed here"),
        "{}",
        calls[0].result
    );
    // The second ran; PostToolUse's additionalContext joined its result.
    assert_eq!(calls[1].outcome, ToolOutcome::Ok, "{calls:?}");
    assert!(calls[1].result.starts_with("hi"), "{}", calls[1].result);
    assert!(
        calls[1].result.contains("post-check: output looked fine"),
        "{}",
        calls[1].result
    );
    // The guard saw Claude Code's input: Bash with tool_input.command.
    let pre = std::fs::read_to_string(f.data("guarded").join("pre.jsonl")).unwrap();
    let seen: Value = serde_json::from_str(pre.lines().next().unwrap()).unwrap();
    assert_eq!(seen["hook_event_name"], "PreToolUse");
    assert_eq!(seen["tool_name"], "Bash");
    assert_eq!(seen["tool_input"]["command"], "echo hi");
    assert_eq!(seen["session_id"], "s1");
    let post: Value = serde_json::from_str(
        &std::fs::read_to_string(f.data("guarded").join("post.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        post["tool_response"]["stdout"].as_str().unwrap().trim(),
        "hi"
    );
    // SessionStart's and UserPromptSubmit's stdout reached the model.
    let said = sent_to_model(&report);
    assert!(said.contains("Session context: be brief."), "{said}");
    assert!(
        said.contains("Prompt context: the project codename is Zebra."),
        "{said}"
    );
    // Stop fired when the turn ended, with the answer.
    let stop: Value = serde_json::from_str(
        &std::fs::read_to_string(f.data("guarded").join("stop.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(stop["hook_event_name"], "Stop");
    assert_eq!(stop["stop_hook_active"], false);
    assert!(report.hook_errors.is_empty(), "{:?}", report.hook_errors);
    f.rt.block_on(agent.shutdown());
}

#[test]
fn a_user_prompt_submit_block_ends_the_turn_before_any_model_call() {
    let f = Fixture::new(&[("guarded", write_guarded)]);
    let agent = f.agent("turns:\n  - say: should not be said\n");
    let report = f.turn(&agent, "s2", "tell me about the forbidden thing");
    assert!(report.model_calls.is_empty(), "{:?}", report.model_calls);
    let reply = report.reply.unwrap_or_default();
    assert!(reply.contains("that topic is off limits"), "{reply}");
    assert!(reply.contains("guarded"), "{reply}");
    f.rt.block_on(agent.shutdown());
}

#[test]
fn hooks_that_hang_print_bad_json_or_exit_1_are_reported_and_the_calls_go_on() {
    let f = Fixture::new(&[("guarded", write_guarded)]);
    let script = r#"
turns:
  - tool_calls:
      - name: read_file
        args: {path: "missing.txt"}
      - name: write_file
        args: {path: "a.txt", content: "x"}
      - name: list_dir
        args: {path: "."}
  - say: done
"#;
    let agent = f.agent(script);
    let started = Instant::now();
    let report = f.turn(&agent, "s3", "go");
    let took = started.elapsed();
    assert!(report.completed, "{:?}", report.error);
    // The hanging hook was cut at its 1 s timeout, not its 30 s sleep.
    assert!(took < Duration::from_secs(10), "{took:?}");
    let calls = &report.tool_calls;
    assert_eq!(calls[1].outcome, ToolOutcome::Ok, "{calls:?}");
    assert_eq!(calls[2].outcome, ToolOutcome::Ok, "{calls:?}");
    let errors: Vec<String> = report
        .hook_errors
        .iter()
        .map(|e| format!("{} {} {}", e.plugin, e.event, e.error))
        .collect();
    assert_eq!(errors.len(), 3, "{errors:?}");
    // The calls of a batch run at once: their hooks' errors in any order.
    for expected in [
        "PreToolUse timed out after 1 s",
        "PreToolUse printed invalid JSON on stdout",
        "PreToolUse exited with status 1: broken",
    ] {
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "{expected}: {errors:?}"
        );
    }
    assert!(
        errors.iter().all(|e| e.starts_with("guarded ")),
        "{errors:?}"
    );
    f.rt.block_on(agent.shutdown());
}

fn write_timed(dir: &Path) {
    std::fs::create_dir_all(dir.join(".claude-plugin")).unwrap();
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    std::fs::write(
        dir.join(".claude-plugin/plugin.json"),
        json!({"name": "timed"}).to_string(),
    )
    .unwrap();
    // A hook on `LS` (list_dir) only: `read_file` calls run without one.
    std::fs::write(
        dir.join("hooks/hooks.json"),
        json!({"hooks": {"PreToolUse": [{"matcher": "LS",
            "hooks": [{"type": "command", "command": "cat > /dev/null"}]}]}})
        .to_string(),
    )
    .unwrap();
}

/// The cost of one PreToolUse command hook per tool call, in one run: the
/// same kind of call with a hook matching it (`list_dir`, Claude Code's
/// `LS`) and without (`list_dir` on a host without the plugin), each
/// call's own duration as the report measures it.
#[test]
fn perf_a_pre_tool_use_command_hook_costs_one_process_start_per_call() {
    const N: usize = 20; // under the default cap of 25 model iterations
                         // One call per model turn: the calls run one after another.
    let script = {
        let turns: String = (0..N)
            .map(|_| {
                "  - tool_calls:\n      - name: list_dir\n        args: {path: \".\"}\n".to_string()
            })
            .collect();
        format!("turns:\n{turns}  - say: done\n")
    };
    let per_call = |f: &Fixture, session: &str| {
        let agent = f.agent(&script);
        let report = f.turn(&agent, session, "go");
        assert_eq!(report.tool_calls.len(), N);
        assert!(report
            .tool_calls
            .iter()
            .all(|c| c.outcome == ToolOutcome::Ok));
        f.rt.block_on(agent.shutdown());
        report.timings.tools_ms / N as f64
    };
    let hooked = Fixture::new(&[("timed", write_timed)]);
    let plain = Fixture::new(&[]);
    // A warm-up of each, then the measured runs.
    per_call(&hooked, "warm");
    per_call(&plain, "warm");
    let with = per_call(&hooked, "measured");
    let without = per_call(&plain, "measured");
    eprintln!(
        "PreToolUse command hook: {with:.3} ms per call with one, {without:.3} ms without: {:.3} ms per hook",
        with - without
    );
    assert!(
        with > without,
        "a process per call costs something: {with} vs {without}"
    );
}

/// An isolated plugin's command hooks run in its worker: the guard still
/// blocks, PostToolUse feedback and UserPromptSubmit context still arrive.
#[test]
fn an_isolated_plugins_hooks_run_in_its_worker() {
    let home = tempfile::tempdir().unwrap();
    let bundled = tempfile::tempdir().unwrap();
    write_guarded(&home.path().join("plugins/guarded"));
    std::fs::write(
        home.path().join("config.json"),
        json!({"plugins": {"enabled": ["guarded"]}}).to_string(),
    )
    .unwrap();
    let script = home.path().join("s.yaml");
    std::fs::write(
        &script,
        EXEC_TWICE.replace("{tool_results}", "{user_message} | {tool_results}"),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home.path())
        .args([
            "--isolate",
            "all",
            "run",
            "--json",
            "--model",
            "scripted",
            "--script",
        ])
        .arg(&script)
        .arg("clean up")
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .current_dir(home.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&text).unwrap();
    let calls = report["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["outcome"], "blocked", "{report}");
    assert!(
        calls[0]["result"]
            .as_str()
            .unwrap()
            .contains("recursive rm"),
        "{report}"
    );
    assert!(
        calls[1]["result"]
            .as_str()
            .unwrap()
            .contains("post-check: output looked fine"),
        "{report}"
    );
    let reply = report["reply"].as_str().unwrap();
    assert!(
        reply.contains("Prompt context: the project codename is Zebra."),
        "{reply}"
    );
}

fn write_rewriter(dir: &Path) {
    std::fs::create_dir_all(dir.join(".claude-plugin")).unwrap();
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    std::fs::write(
        dir.join(".claude-plugin/plugin.json"),
        json!({"name": "rewriter"}).to_string(),
    )
    .unwrap();
    let answer = |v: Value| format!("echo '{v}'");
    let rewrite = answer(json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "allow", "updatedInput": {"command": "echo rewritten"}}}));
    let deny = answer(json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "deny", "permissionDecisionReason": "no writes to secrets"}}));
    std::fs::write(
        dir.join("hooks/hooks.json"),
        json!({"hooks": {"PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": rewrite, "if": "Bash(echo original:*)"}]},
            {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": deny, "if": "Write(secrets*)"}]}
        ]}})
        .to_string(),
    )
    .unwrap();
}

#[test]
fn json_answers_rewrite_the_input_or_deny_with_the_reason_and_if_rules_narrow_them() {
    let f = Fixture::new(&[("rewriter", write_rewriter)]);
    let script = r#"
turns:
  - tool_calls:
      - name: exec
        args: {command: "echo original"}
      - name: exec
        args: {command: "echo untouched"}
      - name: write_file
        args: {path: "secrets.txt", content: "x"}
      - name: write_file
        args: {path: "notes.txt", content: "x"}
  - say: done
"#;
    let agent = f.agent(script);
    let report = f.turn(&agent, "j1", "go");
    let calls = &report.tool_calls;
    assert_eq!(calls[0].result.trim(), "rewritten", "{calls:?}");
    assert_eq!(calls[1].result.trim(), "untouched", "{calls:?}");
    assert!(
        matches!(&calls[2].outcome, ToolOutcome::Blocked { .. }),
        "{calls:?}"
    );
    assert!(
        calls[2].result.contains("no writes to secrets"),
        "{calls:?}"
    );
    assert_eq!(calls[3].outcome, ToolOutcome::Ok, "{calls:?}");
    assert!(report.hook_errors.is_empty(), "{:?}", report.hook_errors);
    f.rt.block_on(agent.shutdown());
}
