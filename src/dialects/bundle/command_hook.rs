//! A Claude Code command hook on the bus ([`CommandHook`]): what it is
//! shown at each point (Claude Code's input JSON), and where its answer
//! ([`super::hooks::read_answer`]) goes (`translate`, whose table says it).

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::hooks::{read_answer, rule_admits, run_command, Answer, HookDecl};
use super::lanes::ClaudeEvent;
use super::tool_names;
use crate::core::agent_link::Injected;
use crate::core::contexts::EndedBy;
use crate::core::extensions::Extensions;
use crate::core::hooks::{
    HookAction, HookCallback, HookEvent, HookPayload, HookReturn, LaneId, LoopContext,
    LoopDecision, LoopEdit,
};

/// A command hook subscribed to the bus.
pub struct CommandHook {
    pub decl: HookDecl,
    pub plugin: String,
    pub root: PathBuf,
    pub data: PathBuf,
    /// Its plugin's `userConfig` values: `${user_config.KEY}` in the
    /// command, `CLAUDE_PLUGIN_OPTION_<KEY>` in its environment.
    pub options: super::claude::Options,
    /// The host's state (the injected messages); `None` in a worker.
    pub state: Option<Arc<Extensions>>,
    /// In a worker: where a `SessionStart` hook's context waits for the
    /// turn's prompt ([`super::session_context`]).
    pub session_context: Option<Arc<super::session_context::Pending>>,
}

/// What a hook is shown, and what its answer acts on.
struct Call {
    input: Map<String, Value>,
    session: String,
    tool: String,
    /// PostToolUse: the result so far.
    result: String,
    /// Stop, SubagentStop: fired at the answer point (a block continues the turn).
    at_answer: bool,
}

impl CommandHook {
    /// The event's input for this payload, or `None` when the hook does
    /// not apply (its matcher, its `if`, a sub-agent's prompt).
    fn shown(&self, payload: &HookPayload<'_>) -> Option<Call> {
        let mut input = Map::new();
        let call = |session: &str| Call {
            input: Map::new(),
            session: session.to_string(),
            tool: String::new(),
            result: String::new(),
            at_answer: false,
        };
        let (mut c, subject): (Call, Option<String>) = match (self.decl.event, payload) {
            (ClaudeEvent::PreToolUse | ClaudeEvent::PostToolUse, HookPayload::Loop(lc)) => {
                let tool = lc.tool_call.name.clone();
                let claude = tool_names::claude_name(&tool).to_string();
                let tool_input = tool_names::to_claude(&tool, &lc.tool_call.arguments);
                if let Some(rule) = &self.decl.condition {
                    if !rule_admits(rule, &claude, &tool_input) {
                        return None;
                    }
                }
                if !self.decl.matcher.admits(&claude) && !self.decl.matcher.admits(&tool) {
                    return None;
                }
                input.insert("tool_name".into(), json!(claude));
                input.insert("tool_input".into(), tool_input);
                input.insert("tool_use_id".into(), json!(lc.tool_call.id));
                let mut c = call(&lc.session_id);
                if self.decl.event == ClaudeEvent::PostToolUse {
                    let mut response = json!({"output": lc.result, "is_error": lc.is_error});
                    if tool == "exec" {
                        response["stdout"] = json!(lc.result);
                        response["stderr"] = json!("");
                        response["interrupted"] = json!(false);
                    }
                    input.insert("tool_response".into(), response);
                    c.result = lc.result.clone();
                }
                c.tool = tool;
                (c, None)
            }
            (ClaudeEvent::UserPromptSubmit, HookPayload::Loop(lc)) => {
                if lc.delegate {
                    return None;
                }
                // The turn's message (what P4 shows; the list's last user
                // message may be context a hook appended before this one).
                let last_user = || {
                    lc.messages
                        .iter()
                        .rev()
                        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                        .and_then(|m| m.get("content"))
                        .map(|c| match c {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                        .unwrap_or_default()
                };
                let prompt = if lc.text.is_empty() {
                    last_user()
                } else {
                    lc.text.clone()
                };
                input.insert("prompt".into(), json!(prompt));
                (call(&lc.session_id), None)
            }
            (ClaudeEvent::Stop | ClaudeEvent::SubagentStop, HookPayload::Loop(lc)) => {
                (self.stop_shown(lc, &mut input)?, None)
            }
            (ClaudeEvent::PreCompact, HookPayload::Loop(lc)) => {
                input.insert("trigger".into(), json!("manual"));
                input.insert("custom_instructions".into(), json!(""));
                (call(&lc.session_id), Some("manual".into()))
            }
            (ClaudeEvent::SessionStart, HookPayload::Session(s)) => {
                input.insert("source".into(), json!("startup"));
                (call(&s.session_id), Some("startup".into()))
            }
            (ClaudeEvent::SessionEnd, HookPayload::Session(s)) => {
                let reason = match s.stage {
                    Some(e) if crate::core::hooks::Point::SessionReset.lanes().contains(&e) => {
                        "clear"
                    }
                    _ => "other",
                };
                input.insert("reason".into(), json!(reason));
                (call(&s.session_id), Some(reason.into()))
            }
            // A sub-agent that ended without an answer (failed, the
            // iteration cap); one that answered met the answer point.
            (ClaudeEvent::SubagentStop, HookPayload::Subagent(s)) => {
                if s.reason == "completed" {
                    return None;
                }
                input.insert("stop_hook_active".into(), json!(false));
                input.insert("agent_id".into(), json!(s.subagent_id));
                (call(&s.session_id), None)
            }
            _ => return None,
        };
        if let Some(subject) = subject {
            if !self.decl.matcher.admits(&subject) {
                return None;
            }
        }
        let cwd = cwd();
        let mut common = Map::new();
        common.insert("session_id".into(), json!(c.session));
        common.insert("transcript_path".into(), json!(""));
        common.insert("cwd".into(), json!(cwd.to_string_lossy()));
        common.insert("permission_mode".into(), json!("default"));
        common.insert("hook_event_name".into(), json!(self.decl.event.name()));
        common.extend(input);
        c.input = common;
        Some(c)
    }

    /// `Stop` and `SubagentStop` on a loop point: at the answer point (a
    /// block keeps the turn going), or at the end of a turn that ended
    /// without an answer the answer point saw (observed only); `None` when
    /// the hook does not apply.
    fn stop_shown(&self, lc: &LoopContext, input: &mut Map<String, Value>) -> Option<Call> {
        let mut c = Call {
            input: Map::new(),
            session: lc.session_id.clone(),
            tool: String::new(),
            result: String::new(),
            at_answer: lc.stage == Some(HookEvent::Lane(LaneId(&super::lanes::STOP))),
        };
        let subagent = self.decl.event == ClaudeEvent::SubagentStop;
        if c.at_answer {
            if lc.delegate != subagent {
                return None;
            }
            input.insert("stop_hook_active".into(), json!(lc.attempt > 0));
            if subagent {
                input.insert("agent_id".into(), json!(lc.session_id));
            }
        } else {
            if subagent
                || lc.delegate
                || matches!(
                    lc.ended_by,
                    EndedBy::Answer | EndedBy::Command | EndedBy::Skipped | EndedBy::Interrupted
                )
            {
                return None;
            }
            input.insert("stop_hook_active".into(), json!(false));
        }
        input.insert("last_assistant_message".into(), json!(lc.text));
        c.session = lc.session_id.clone();
        Some(c)
    }

    fn env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self
            .options
            .iter()
            .map(|(k, v)| (super::claude::option_var(k), v.clone()))
            .collect();
        env.extend([
            (
                "CLAUDE_PLUGIN_ROOT".into(),
                self.root.to_string_lossy().into_owned(),
            ),
            (
                "CLAUDE_PLUGIN_DATA".into(),
                self.data.to_string_lossy().into_owned(),
            ),
            (
                "CLAUDE_PROJECT_DIR".into(),
                cwd().to_string_lossy().into_owned(),
            ),
        ]);
        env
    }

    /// The command with `${user_config.KEY}` replaced (the shell expands
    /// the rest from the environment).
    fn command(&self) -> String {
        let mut command = self.decl.command.clone();
        for (k, v) in &self.options {
            command = command.replace(&format!("${{user_config.{k}}}"), v);
        }
        command
    }
}

fn cwd() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
}

/// Where each event's answer goes:
///
/// | event | blocks (exit 2, `block`, `deny`) | `continue: false` | context |
/// |---|---|---|---|
/// | `PreToolUse` | the call is refused with the reason | the turn ends after the batch | — |
/// | `PostToolUse` | the reason is added to the result | the turn ends after the batch | added to the result |
/// | `UserPromptSubmit` | the turn ends with the reason, no model call | the same | a message before the first model call |
/// | `SessionStart` | — | — | a message before the first model call (in a worker: in each turn's in-flight list, [`super::session_context`]) |
/// | `Stop`, `SubagentStop` at the answer | the turn goes on with the reason as a user message | logged | — |
/// | `Stop`, `SubagentStop` after another ending, `SessionEnd`, `PreCompact` | logged | logged | — |
fn translate(hook: &CommandHook, call: &Call, answer: Answer) -> HookAction {
    let event = hook.decl.event;
    let inject = |texts: Vec<String>| {
        if texts.is_empty() {
            return;
        }
        match &hook.state {
            Some(state) => {
                let inbox = state.get::<Injected>();
                for t in texts {
                    inbox.push(&call.session, t);
                }
            }
            None => tracing::warn!(
                "{} hook of '{}': no host to add its context to; dropped",
                event.name(),
                hook.plugin
            ),
        }
    };
    match event {
        ClaudeEvent::PreToolUse => {
            if let Some(stop) = answer.stop {
                return HookAction::Decide(LoopDecision::AbortTurn {
                    reason: stop.clone(),
                    assistant_text: stop.clone(),
                    text: stop,
                });
            }
            if let Some(reason) = answer.block {
                return HookAction::Decide(LoopDecision::Refuse {
                    text: reason.clone(),
                    reason: format!("{} PreToolUse hook: {reason}", hook.plugin),
                    terminate: false,
                });
            }
            match answer.updated_input {
                Some(input) => HookAction::Decide(LoopDecision::Edit(LoopEdit::Arguments(
                    tool_names::from_claude(&call.tool, &input),
                ))),
                None => HookAction::Continue,
            }
        }
        ClaudeEvent::PostToolUse => {
            if let Some(stop) = answer.stop {
                return HookAction::Decide(LoopDecision::AbortTurn {
                    reason: stop.clone(),
                    assistant_text: stop.clone(),
                    text: stop,
                });
            }
            let feedback: Vec<String> = answer.block.into_iter().chain(answer.context).collect();
            if feedback.is_empty() {
                return HookAction::Continue;
            }
            HookAction::Decide(LoopDecision::Edit(LoopEdit::Result(format!(
                "{}\n\nPostToolUse hook feedback:\n{}",
                call.result,
                feedback.join("\n")
            ))))
        }
        ClaudeEvent::UserPromptSubmit => {
            if let Some(reason) = answer.stop.or(answer.block) {
                return HookAction::Decide(LoopDecision::ShortCircuit(format!(
                    "Prompt blocked by the {} plugin's UserPromptSubmit hook: {reason}",
                    hook.plugin
                )));
            }
            let texts: Vec<String> = answer.plain.into_iter().chain(answer.context).collect();
            if hook.state.is_none() && !texts.is_empty() {
                // In an isolated plugin's worker there is no host to queue
                // them in: they join this turn's in-flight list instead.
                let messages = texts
                    .into_iter()
                    .map(|t| json!({"role": "user", "content": t}))
                    .collect();
                return HookAction::Decide(LoopDecision::Edit(LoopEdit::Append(messages)));
            }
            inject(texts);
            HookAction::Continue
        }
        ClaudeEvent::SessionStart => {
            let texts: Vec<String> = answer.plain.into_iter().chain(answer.context).collect();
            match (&hook.state, &hook.session_context) {
                (None, Some(pending)) => pending.add(&call.session, texts),
                _ => inject(texts),
            }
            HookAction::Continue
        }
        ClaudeEvent::Stop | ClaudeEvent::SubagentStop if call.at_answer => {
            if let Some(stop) = answer.stop {
                tracing::info!(
                    "{} hook of '{}' asked to stop ({stop}); the turn ends with its answer",
                    event.name(),
                    hook.plugin
                );
                return HookAction::Continue;
            }
            match answer.block {
                Some(reason) => HookAction::Decide(LoopDecision::ContinueTurn(reason)),
                None => HookAction::Continue,
            }
        }
        _ => {
            if let Some(reason) = answer.block.or(answer.stop) {
                tracing::warn!(
                    "{} hook of '{}' asked to block ({reason}); plughost cannot act on it at this point",
                    event.name(),
                    hook.plugin
                );
            }
            HookAction::Continue
        }
    }
}

impl HookCallback for Arc<CommandHook> {
    fn call(&self, _event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let Some(call) = self.shown(&payload) else {
            return HookReturn::Ready(Ok(HookAction::Continue));
        };
        let hook = Arc::clone(self);
        HookReturn::Pending(Box::pin(async move {
            let input = Value::Object(call.input.clone());
            let ran = run_command(
                &hook.command(),
                &input,
                &hook.env(),
                &cwd(),
                hook.decl.timeout,
            )
            .await?;
            let answer = read_answer(hook.decl.event, &ran)?;
            Ok(translate(&hook, &call, answer))
        }))
    }

    fn event_name(&self, _event: HookEvent) -> Option<String> {
        Some(self.decl.event.name().to_string())
    }
}
