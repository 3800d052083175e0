//! Claude Code sub-agents: `agents/*.md` of a plugin (frontmatter `name`,
//! default the file stem; `description`; `tools`, a list or
//! comma-separated Claude Code or plughost tool names, all tools when
//! absent; `model`), each handed work through plughost's `delegate` tool
//! as `agent: "<plugin>:<name>"` (Claude Code's `subagent_type`).
//!
//! Three callbacks of the dialect make it so, with no change to
//! `delegate`: before each model call the `delegate` definition offered
//! gains an `agent` parameter listing the agents and their descriptions
//! ([`AGENTS_OFFERED`]); before a `delegate` call naming one, its `tools`
//! become the agent's ([`super::tool_names::granted`]) and its task is
//! marked with the agent; when the sub-agent's turn assembles its history,
//! the mark is removed and the agent's body replaces the system prompt.
//! Its `model` is not used (Claude Code's model names are not plughost's
//! providers).

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::core::hooks::{
    HookAction, HookCallback, HookEvent, HookPayload, HookReturn, Lane, LoopDecision, LoopEdit,
    Point, Policy,
};

/// Before every model call: the `delegate` tool offered names the agents.
pub static AGENTS_OFFERED: Lane = Lane::plain(
    &AGENTS_OFFERED,
    "claude_agents_offered",
    Point::PromptAssembly,
    3,
    Policy::Chain,
    "P5, third lane: before every model call, the `delegate` tool offered gains an `agent` parameter naming Claude Code plugins' sub-agents.",
);

/// The mark a `delegate` task naming an agent starts with.
const MARK: &str = "[claude-agent ";

#[derive(Clone, Debug)]
pub struct Agent {
    /// `plugin:name`.
    pub name: String,
    pub description: String,
    /// plughost tool names; `None`: every tool.
    pub tools: Option<Vec<String>>,
    pub model: Option<String>,
    pub prompt: String,
}

/// The agents of the plugin `plugin` at `root`.
pub fn read(root: &Path, plugin: &str, diagnostics: &mut Vec<String>) -> Vec<Agent> {
    let Ok(entries) = std::fs::read_dir(root.join("agents")) else {
        return Vec::new();
    };
    let files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    let mut out: Vec<Agent> = Vec::new();
    for super::commands::Markdown { stem, fm, body, .. } in
        super::commands::parsed_markdown(files, "agent", diagnostics)
    {
        let own = fm
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or(&stem)
            .trim()
            .to_string();
        let name = format!("{plugin}:{own}");
        if out.iter().any(|a| a.name == name) {
            diagnostics.push(format!(
                "agent:{own}: a second agent of that name; left out"
            ));
            continue;
        }
        let tools = super::commands::list(&fm, "tools")
            .filter(|t| !t.is_empty() && t != &["*"])
            .map(|t| super::tool_names::granted(&t));
        out.push(Agent {
            name,
            description: fm
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            tools,
            model: fm.get("model").and_then(Value::as_str).map(str::to_string),
            prompt: body.trim().to_string(),
        });
    }
    out
}

/// The agents of one plugin, on their three lanes.
pub struct Agents(pub Vec<Agent>);

impl Agents {
    fn find(&self, name: &str) -> Option<&Agent> {
        self.0.iter().find(|a| a.name == name)
    }

    /// P5: add this plugin's agents to the `delegate` definition's `agent` enum.
    fn offer(&self, tools: &[Value]) -> Option<Vec<Value>> {
        let mut tools = tools.to_vec();
        let delegate = tools
            .iter_mut()
            .find(|t| t["function"]["name"] == "delegate")?;
        let params = &mut delegate["function"]["parameters"];
        let properties = params.get_mut("properties")?.as_object_mut()?;
        let agent = properties.entry("agent").or_insert_with(|| {
            json!({"type": "string", "enum": [],
                   "description": "A sub-agent to hand the task to (its instructions and tools are used):"})
        });
        for a in &self.0 {
            if let Some(names) = agent["enum"].as_array_mut() {
                if !names.iter().any(|n| n == a.name.as_str()) {
                    names.push(json!(a.name));
                }
            }
            let line = format!("\n- {}: {}", a.name, a.description);
            if let Some(Value::String(d)) = agent.get_mut("description") {
                d.push_str(&line);
            }
        }
        Some(tools)
    }

    /// P9: a `delegate` call naming one of these agents runs with its tools
    /// and its task marked.
    fn limit(&self, arguments: &Value) -> Option<Value> {
        let name = arguments.get("agent").and_then(Value::as_str)?;
        let agent = self.find(name)?;
        let mut args = arguments.clone();
        let task = args.get("task").and_then(Value::as_str).unwrap_or_default();
        if task.starts_with(MARK) {
            return None;
        }
        args["task"] = json!(format!("{MARK}{}]\n{task}", agent.name));
        match &agent.tools {
            Some(tools) => args["tools"] = json!(tools),
            None => {
                if let Some(a) = args.as_object_mut() {
                    a.remove("tools");
                }
            }
        }
        Some(args)
    }

    /// The sub-agent's history: the mark removed, the agent's prompt as
    /// the system prompt.
    fn instruct(&self, messages: &[Value]) -> Option<Vec<Value>> {
        let at = messages.iter().rposition(|m| m["role"] == "user")?;
        let content = messages[at]["content"].as_str()?;
        let rest = content.strip_prefix(MARK)?;
        let (name, task) = rest.split_once("]\n")?;
        let agent = self.find(name)?;
        let mut out = messages.to_vec();
        out[at]["content"] = json!(task);
        match out.first_mut() {
            Some(first) if first["role"] == "system" => {
                first["content"] = json!(agent.prompt);
            }
            _ => out.insert(0, json!({"role": "system", "content": agent.prompt})),
        }
        Some(out)
    }
}

impl HookCallback for Arc<Agents> {
    fn call(&self, event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let HookPayload::Loop(lc) = payload else {
            return HookReturn::Ready(Ok(HookAction::Continue));
        };
        let edit = match event.point() {
            Point::PromptAssembly => self.offer(&lc.tools).map(LoopEdit::Tools),
            Point::ToolBefore if lc.tool_call.name == "delegate" => {
                self.limit(&lc.tool_call.arguments).map(LoopEdit::Arguments)
            }
            Point::HistoryReady if lc.delegate => {
                self.instruct(&lc.messages).map(LoopEdit::Messages)
            }
            _ => None,
        };
        HookReturn::Ready(Ok(match edit {
            Some(edit) => HookAction::Decide(LoopDecision::Edit(edit)),
            None => HookAction::Continue,
        }))
    }

    fn native(&self, _event: HookEvent) -> bool {
        true
    }

    fn event_name(&self, event: HookEvent) -> Option<String> {
        Some(format!("agents ({event})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agents() -> Agents {
        Agents(vec![Agent {
            name: "p:reviewer".into(),
            description: "Reviews code".into(),
            tools: Some(vec!["read_file".into()]),
            model: None,
            prompt: "You review code.".into(),
        }])
    }

    #[test]
    fn offered_limited_and_instructed() {
        let a = agents();
        let tools = vec![json!({"type": "function", "function": {"name": "delegate",
            "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}})];
        let offered = a.offer(&tools).unwrap();
        let agent = &offered[0]["function"]["parameters"]["properties"]["agent"];
        assert_eq!(agent["enum"], json!(["p:reviewer"]));
        assert!(agent["description"]
            .as_str()
            .unwrap()
            .contains("Reviews code"));
        let args = a
            .limit(&json!({"task": "look", "agent": "p:reviewer", "tools": ["exec"]}))
            .unwrap();
        assert_eq!(args["tools"], json!(["read_file"]));
        assert!(a
            .limit(&json!({"task": "look", "agent": "q:other"}))
            .is_none());
        let history = vec![
            json!({"role": "system", "content": "host"}),
            json!({"role": "user", "content": args["task"]}),
        ];
        let out = a.instruct(&history).unwrap();
        assert_eq!(out[0]["content"], "You review code.");
        assert_eq!(out[1]["content"], "look");
    }
}
