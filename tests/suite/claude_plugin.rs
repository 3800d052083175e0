//! A Claude Code plugin's commands, agents, skills and MCP servers (issue
//! 48, items 2–4): `commands/*.md` as `/plugin:name` prompts that run as a
//! turn, an agent handed work through `delegate` with its own prompt and
//! tools, a skill whose frontmatter name differs from its folder, and an
//! MCP server started by an absolute interpreter path.

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::claude_hooks::Fixture;
use crate::mcp_client_common::{mcp_python, SERVER};
use plughost::agent::provider::scripted::{Script, Scripted};
use plughost::agent::provider::{ChatRequest, ChatResponse, Provider, ProviderError, StreamEvent};
use plughost::core::hooks::BoxFuture;
use plughost::ToolOutcome;
use serde_json::{json, Value};

/// The absolute path of a Python with `mcp` (Claude Code plugins name
/// `/usr/bin/python3` and the like).
fn absolute_python() -> Option<String> {
    let python = mcp_python()?;
    let out = std::process::Command::new(&python)
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The plugin `kit`: two commands, an agent, a skill, an MCP server.
pub fn write_kit(dir: &Path) {
    for d in [".claude-plugin", "commands/git", "agents", "skills/renamed"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(
        dir.join(".claude-plugin/plugin.json"),
        json!({"name": "kit", "version": "2.1.0", "description": "A kit",
               "author": {"name": "T"}})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("commands/fix.md"),
        "---\ndescription: Fix an issue\nargument-hint: [issue] [priority]\nmodel: sonnet\n---\nFix issue #$1 with priority $2. All arguments: $ARGUMENTS\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("commands/git/status.md"),
        "---\ndescription: Show status\n---\nStatus: !`echo clean`\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("agents/reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews code strictly\ntools: Read, Grep, Glob\nmodel: opus\n---\nYou are a strict code reviewer.\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("skills/renamed/SKILL.md"),
        "---\nname: a-different-name\ndescription: Renamed skill.\n---\nUse it.\n",
    )
    .unwrap();
    std::fs::write(dir.join("server.py"), SERVER).unwrap();
    if let Some(python) = absolute_python() {
        std::fs::write(
            dir.join(".mcp.json"),
            json!({"mcpServers": {"tools": {"command": python,
                "args": ["${CLAUDE_PLUGIN_ROOT}/server.py", "stdio"],
                "env": {"GREETING": "kit"}}}})
            .to_string(),
        )
        .unwrap();
    }
}

/// One request as the model saw it: its session, system prompt and tools.
type Seen = (String, String, Vec<Value>);

/// The scripted model, remembering each request's system prompt and tools.
struct Recording {
    inner: Scripted,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Provider for Recording {
    fn model(&self) -> String {
        self.inner.model()
    }
    fn complete(
        &self,
        request: ChatRequest,
        stream: Option<tokio::sync::mpsc::UnboundedSender<StreamEvent>>,
    ) -> BoxFuture<Result<ChatResponse, ProviderError>> {
        let system = request.system.clone();
        self.seen.lock().unwrap().push((
            request.session_key.clone(),
            system,
            request.tools.to_vec(),
        ));
        self.inner.complete(request, stream)
    }
}

fn tool_names(tools: &[Value]) -> Vec<String> {
    tools
        .iter()
        .map(|t| {
            t["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn a_command_sends_its_prompt_as_a_turn_with_its_arguments() {
    let f = Fixture::new(&[("kit", write_kit)]);
    let registry = f.host.registry();
    let fix = registry
        .command("kit:fix")
        .expect("the command is registered");
    assert_eq!(fix.description, "Fix an issue");
    assert_eq!(fix.args_hint, "[issue] [priority]");
    assert!(
        registry.command("kit:status").is_some(),
        "commands/git/status.md"
    );
    drop(registry);
    let agent = f.agent("turns:\n  - say: \"model got: {user_message}\"\n");
    let report = f.turn(&agent, "c1", "/kit:fix 42 high");
    assert!(!report.command, "the command ran as a turn");
    assert_eq!(report.model_calls.len(), 1);
    assert_eq!(
        report.reply.as_deref(),
        Some("model got: Fix issue #42 with priority high. All arguments: 42 high")
    );
    f.rt.block_on(agent.shutdown());
}

#[test]
fn a_command_whose_shell_line_is_not_allowed_is_refused_with_the_line() {
    let f = Fixture::new(&[("kit", write_kit)]);
    let agent = f.agent("turns:\n  - say: never\n");
    let report = f.turn(&agent, "c2", "/kit:status");
    assert!(report.model_calls.is_empty());
    let reply = report.reply.unwrap_or_default();
    assert!(
        reply.contains("!`echo clean`") && reply.contains("does not grant"),
        "{reply}"
    );
    f.rt.block_on(agent.shutdown());
}

#[test]
fn an_agent_takes_work_through_delegate_with_its_prompt_and_only_its_tools() {
    let f = Fixture::new(&[("kit", write_kit)]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let script = r#"
turns:
  - tool_calls:
      - name: delegate
        args: {task: "review a.txt", agent: "kit:reviewer"}
  - say: "sub: {user_message} | {tool_results}"
"#;
    let provider = Arc::new(Recording {
        inner: Scripted::new(Script::parse(script, "t.yaml").unwrap()),
        seen: Arc::clone(&seen),
    });
    let agent = f.agent_with(provider);
    let report = f.turn(&agent, "parent", "please review");
    assert!(report.completed, "{:?}", report.error);
    let delegate = &report.tool_calls[0];
    assert_eq!(delegate.outcome, ToolOutcome::Ok, "{}", delegate.result);
    let seen = seen.lock().unwrap();
    // The parent's model was offered the agent on `delegate`.
    let (_, _, parent_tools) = seen.iter().find(|(s, ..)| s == "parent").unwrap();
    let offered = parent_tools
        .iter()
        .find(|t| t["function"]["name"] == "delegate")
        .unwrap();
    let agent_param = &offered["function"]["parameters"]["properties"]["agent"];
    assert_eq!(agent_param["enum"], json!(["kit:reviewer"]));
    assert!(agent_param["description"]
        .as_str()
        .unwrap()
        .contains("Reviews code strictly"));
    // The sub-agent ran with the agent's prompt and its tools only.
    let (_, system, tools) = seen.iter().find(|(s, ..)| s != "parent").unwrap();
    assert_eq!(system, "You are a strict code reviewer.");
    let mut names = tool_names(tools);
    names.sort();
    assert_eq!(names, vec!["list_dir", "read_file"]);
    // Its task arrived without the mark.
    assert!(
        delegate.result.contains("sub: review a.txt"),
        "{}",
        delegate.result
    );
    drop(seen);
    f.rt.block_on(agent.shutdown());
}

#[test]
fn a_skill_is_named_by_its_folder_and_an_absolute_interpreter_starts_the_server() {
    let Some(_) = absolute_python() else { return };
    let f = Fixture::new(&[("kit", write_kit)]);
    let plugins = f.host.plugins();
    let kit = plugins.iter().find(|p| p.key == "kit").unwrap();
    assert_eq!(kit.skills, vec!["kit:renamed".to_string()]);
    assert!(f.host.skill("kit:renamed").unwrap().contains("Use it."));
    let script = r#"
turns:
  - tool_calls:
      - name: mcp_tools_echo
        args: {text: "hi"}
  - say: "{tool_results}"
"#;
    let agent = f.agent(script);
    let report = f.turn(&agent, "m1", "go");
    let call = &report.tool_calls[0];
    assert_eq!(call.outcome, ToolOutcome::Ok, "{}", call.result);
    assert_eq!(call.result, "echo: hi (kit)");
    f.rt.block_on(agent.shutdown());
}

fn write_optioned(dir: &Path) {
    std::fs::create_dir_all(dir.join(".claude-plugin")).unwrap();
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    std::fs::write(
        dir.join(".claude-plugin/plugin.json"),
        json!({"name": "optioned", "userConfig": {
            "token": {"description": "An API token", "sensitive": true},
            "region": {"description": "Where", "default": "eu"},
            "unset": {"description": "Never given"}
        }})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("hooks/hooks.json"),
        json!({"hooks": {"SessionStart": [{"hooks": [{"type": "command",
            "command": "echo \"token=${user_config.token} env=$CLAUDE_PLUGIN_OPTION_TOKEN region=$CLAUDE_PLUGIN_OPTION_REGION\""}]}]}})
        .to_string(),
    )
    .unwrap();
}

#[test]
fn user_config_options_come_from_config_json_or_their_default_and_reach_hooks() {
    let f = Fixture::with_config(
        &[("optioned", write_optioned)],
        json!({"user_config": {"optioned": {"token": "s3cret"}}}),
    );
    let agent = f.agent("turns:\n  - say: ok\n");
    let report = f.turn(&agent, "o1", "hi");
    // What the model was sent (an isolated bundle's SessionStart context
    // joins each call's in-flight list, an in-process one the transcript).
    let said: Vec<String> = report
        .model_calls
        .iter()
        .flat_map(|call| call.sent_messages())
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect();
    assert!(
        said.iter()
            .any(|m| m == "token=s3cret env=s3cret region=eu"),
        "{said:?}"
    );
    f.rt.block_on(agent.shutdown());
}
