//! Claude Code command hooks (`hooks/hooks.json`, or the manifest's
//! `hooks`: a path, a list of paths, or the configuration inline), run as
//! Claude Code runs them, on the loop's points ([`super::lanes`]).
//!
//! The configuration is Claude Code's: `{"hooks": {"<Event>": [{"matcher":
//! "…", "hooks": [{"type": "command", "command": "…", "timeout": 10}]}]}}`.
//! Each command runs through `sh -c` in the current directory with the
//! event's JSON on stdin and `CLAUDE_PLUGIN_ROOT`, `CLAUDE_PLUGIN_DATA` and
//! `CLAUDE_PROJECT_DIR` in its environment, bounded by its `timeout`
//! (seconds; 60 by default), after which its process group is killed and
//! the hook counts as failed (the loop goes on, as in Claude Code).
//!
//! What an exit means, as in Claude Code: `0` is success (stdout is read as
//! a JSON answer when it starts with `{`, else as text); `2` is a blocking
//! error whose stderr is fed back (a blocked tool call, a blocked prompt,
//! feedback after a call); any other status is a non-blocking error,
//! counted and reported in `hook_errors`, the loop going on. A JSON answer
//! that does not parse is such an error too.
//!
//! The answers honoured: `continue: false` (with `stopReason`) ends the turn;
//! `decision: "block"` with `reason`; `hookSpecificOutput` with
//! `permissionDecision` (`deny`, and `ask`, which plughost cannot ask and
//! refuses; `allow` lets the call go on), `permissionDecisionReason`,
//! `updatedInput` and `additionalContext`; `suppressOutput` and
//! `systemMessage` only affect what Claude Code's terminal shows, and are
//! logged. Where each event's answers go is the table in [`super::command_hook`].
//!
//! Matchers (`PreToolUse`, `PostToolUse`: the tool; `SessionStart`: the
//! source; `PreCompact`: the trigger; `SessionEnd`: the reason) follow
//! Claude Code: empty or `*` match everything, a string of letters,
//! digits, `_` and `|` is a list of exact names, anything else a regular
//! expression searched in the name. A tool is matched under its Claude
//! Code name ([`super::tool_names`]) or plughost's.
//!
//! Decisions where Claude Code differs or says nothing:
//! - hooks of one event run one after another in the file's order, each
//!   a bus entry (Claude Code runs them in parallel);
//! - `Stop` and `SubagentStop` fire at plughost's answer point (the
//!   model's reply has no tool calls): a `block` (or exit 2) keeps the turn
//!   going with its reason as a user message, `stop_hook_active` being true
//!   at the next answer; at most 3 times per turn (the core's bound,
//!   `MAX_ANSWER_CONTINUATIONS`), after which the answer stands and Stop
//!   does not fire again for it. A turn that ends otherwise (a
//!   short-circuit, an error, the iteration cap) fires `Stop` at its end,
//!   where a block is only logged; a sub-agent's `SubagentStop` carries its
//!   own session key as `session_id` and `agent_id`;
//! - `PreCompact` fires before `/compact` and cannot cancel it;
//! - text for the model (`additionalContext`, a `UserPromptSubmit` or
//!   `SessionStart` hook's stdout) joins the conversation as a user
//!   message at the next model call, as messages plugins inject do; in an
//!   isolated plugin's worker, a `UserPromptSubmit` hook's joins the turn's
//!   in-flight messages (not the transcript), and a `SessionStart` hook's
//!   is dropped with a warning (its lane takes no answers);
//! - `type` other than `command` (`prompt`, `agent`, `http`) is left out
//!   with a diagnostic.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Map, Value};

use super::lanes::ClaudeEvent;
use crate::core::hooks::HookError;

/// Claude Code's default timeout of a command hook.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Which names a hook's matcher admits.
#[derive(Clone, Debug)]
pub enum Matcher {
    All,
    Names(Vec<String>),
    Pattern(regex::Regex),
}

impl Matcher {
    /// Claude Code's rule: empty or `*` is every name, `A|B` exact names,
    /// anything else a regular expression.
    pub fn parse(text: &str) -> Result<Matcher, String> {
        let text = text.trim();
        if text.is_empty() || text == "*" {
            return Ok(Matcher::All);
        }
        if text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|')
        {
            return Ok(Matcher::Names(
                text.split('|').map(str::to_string).collect(),
            ));
        }
        regex::Regex::new(text)
            .map(Matcher::Pattern)
            .map_err(|e| format!("matcher '{text}' is not a regular expression: {e}"))
    }

    pub fn admits(&self, name: &str) -> bool {
        match self {
            Matcher::All => true,
            Matcher::Names(names) => names.iter().any(|n| n == name),
            Matcher::Pattern(re) => re.is_match(name),
        }
    }
}

/// One command hook as its configuration declares it.
#[derive(Clone, Debug)]
pub struct HookDecl {
    pub event: ClaudeEvent,
    pub matcher: Matcher,
    /// Claude Code's `if` (a permission rule such as `Bash(git commit:*)`).
    pub condition: Option<String>,
    pub command: String,
    pub timeout: Duration,
}

/// The hooks of the plugin at `root`: `hooks/hooks.json`, and what its
/// manifest's `hooks` names; what cannot run is a diagnostic.
pub fn read(
    root: &Path,
    manifest: &Map<String, Value>,
    diagnostics: &mut Vec<String>,
) -> Vec<HookDecl> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    let default = root.join("hooks/hooks.json");
    if default.is_file() {
        files.push(default);
    }
    let mut inline = Vec::new();
    let mut add = |v: &Value, diagnostics: &mut Vec<String>| match v {
        Value::String(path) => {
            let relative = path.strip_prefix("./").unwrap_or(path);
            match super::package::scoped(root, relative) {
                Ok(p) if !files.contains(&p) => files.push(p),
                Ok(_) => {}
                Err(e) => diagnostics.push(format!("hooks: {path}: {e}")),
            }
        }
        Value::Object(_) => inline.push(v.clone()),
        _ => diagnostics.push("hooks: must be a path, a list of paths or an object".into()),
    };
    match manifest.get("hooks") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                add(item, diagnostics);
            }
        }
        Some(other) => add(other, diagnostics),
    }
    for file in files {
        let label = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let parsed = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read it: {e}"))
            .and_then(|t| {
                serde_json::from_str::<Value>(t.trim_start_matches('\u{feff}'))
                    .map_err(|e| format!("is not valid JSON: {e}"))
            });
        match parsed {
            Ok(config) => config_hooks(&config, &label, &mut out, diagnostics),
            Err(e) => diagnostics.push(format!("hooks: {label} {e}")),
        }
    }
    for config in inline {
        config_hooks(&config, "plugin.json hooks", &mut out, diagnostics);
    }
    out
}

fn config_hooks(config: &Value, label: &str, out: &mut Vec<HookDecl>, diags: &mut Vec<String>) {
    let events = match config.get("hooks") {
        Some(Value::Object(m)) => m,
        Some(_) => {
            diags.push(format!("hooks: {label}: hooks must be an object"));
            return;
        }
        None => match config.as_object() {
            Some(m) => m,
            None => return,
        },
    };
    for (name, groups) in events {
        if name == "description" {
            continue;
        }
        let Some(event) = ClaudeEvent::from_name(name) else {
            let why = ClaudeEvent::never_fires(name).unwrap_or_default();
            diags.push(format!("hooks: {label}: {name}: {why}; not run"));
            continue;
        };
        let Some(groups) = groups.as_array() else {
            diags.push(format!("hooks: {label}: {name} must be a list"));
            continue;
        };
        for group in groups {
            let matcher = match group.get("matcher") {
                None | Some(Value::Null) => Ok(Matcher::All),
                Some(Value::String(m)) => Matcher::parse(m),
                Some(_) => Err("matcher must be a string".to_string()),
            };
            let matcher = match matcher {
                Ok(m) => m,
                Err(e) => {
                    diags.push(format!("hooks: {label}: {name}: {e}; not run"));
                    continue;
                }
            };
            let Some(hooks) = group.get("hooks").and_then(Value::as_array) else {
                diags.push(format!(
                    "hooks: {label}: {name}: a group needs a hooks list"
                ));
                continue;
            };
            for hook in hooks {
                let kind = hook.get("type").and_then(Value::as_str).unwrap_or_default();
                if kind != "command" {
                    diags.push(format!(
                        "hooks: {label}: {name}: a '{kind}' hook is not run (plughost runs command hooks)"
                    ));
                    continue;
                }
                let command = hook
                    .get("command")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if command.trim().is_empty() {
                    diags.push(format!(
                        "hooks: {label}: {name}: a command hook without a command"
                    ));
                    continue;
                }
                let timeout = match hook.get("timeout") {
                    None | Some(Value::Null) => DEFAULT_TIMEOUT,
                    Some(t) => match t.as_f64() {
                        Some(s) if s > 0.0 && s.is_finite() => Duration::from_secs_f64(s),
                        _ => {
                            diags.push(format!(
                                "hooks: {label}: {name}: timeout must be a positive number of seconds"
                            ));
                            continue;
                        }
                    },
                };
                out.push(HookDecl {
                    event,
                    matcher: matcher.clone(),
                    condition: hook.get("if").and_then(Value::as_str).map(str::to_string),
                    command: command.to_string(),
                    timeout,
                });
            }
        }
    }
}

/// Whether a permission rule such as `Bash(git commit:*)`, `Edit` or
/// `Write(src/*)` admits the call of Claude Code's tool `tool` with
/// `input`: the name, then a prefix (`…:*` or `…*`) or exact match of the
/// command or path.
pub fn rule_admits(rule: &str, tool: &str, input: &Value) -> bool {
    let rule = rule.trim();
    let (name, pattern) = match rule.split_once('(') {
        Some((n, rest)) => (n.trim(), Some(rest.strip_suffix(')').unwrap_or(rest))),
        None => (rule, None),
    };
    if name != tool {
        return false;
    }
    let Some(pattern) = pattern else { return true };
    let subject = ["command", "file_path", "path", "url", "query", "prompt"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
        .unwrap_or_default();
    if let Some(prefix) = pattern
        .strip_suffix(":*")
        .or_else(|| pattern.strip_suffix('*'))
    {
        subject.starts_with(prefix)
    } else {
        subject == pattern
    }
}

/// What a hook's process did.
#[derive(Debug, Default)]
pub struct Ran {
    /// `None`: killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Kills a hook's process group if it is dropped before it finished (its
/// timeout ran out, or the bus abandoned the call).
struct Group(Option<u32>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            // SAFETY: a plain syscall on a process group this module made.
            unsafe { libc::killpg(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

/// Run `command` through `sh -c` with `input` on stdin, bounded by `timeout`.
///
/// The input is handed over as an unlinked temporary file, not a pipe: a
/// hook that exits without reading it (`echo …`) would make writing to a
/// pipe raise SIGPIPE, which ends the `plughost` binary (its CLI restores
/// the signal's default action).
pub async fn run_command(
    command: &str,
    input: &Value,
    env: &[(String, String)],
    cwd: &Path,
    timeout: Duration,
) -> Result<Ran, HookError> {
    use std::io::{Seek, Write};
    let stdin = (|| {
        let mut file = tempfile::tempfile()?;
        serde_json::to_writer(&mut file, input)?;
        file.flush()?;
        file.rewind()?;
        Ok::<_, std::io::Error>(file)
    })()
    .map_err(|e| HookError::raised(format!("cannot write the hook's input: {e}")))?;
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .map_err(|e| HookError::raised(format!("cannot start `{command}`: {e}")))?;
    let mut group = Group(child.id());
    let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Err(_) => return Err(HookError::TimedOut(timeout)), // `group` kills it
        Ok(Err(e)) => return Err(HookError::raised(format!("`{command}` failed: {e}"))),
        Ok(Ok(out)) => out,
    };
    // It finished: what it started in the background and detached from
    // its output stays, as in Claude Code.
    group.0 = None;
    Ok(Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// A hook's answer, read from its exit and output.
#[derive(Debug, Default, PartialEq)]
pub struct Answer {
    /// Exit 2's stderr, a `block` or `deny` reason.
    pub block: Option<String>,
    /// `continue: false`: its `stopReason`.
    pub stop: Option<String>,
    /// `additionalContext`.
    pub context: Vec<String>,
    /// Stdout that is not JSON.
    pub plain: Option<String>,
    /// `updatedInput` (Claude Code's shape).
    pub updated_input: Option<Value>,
}

/// Read what the process did as Claude Code reads it.
pub fn read_answer(event: ClaudeEvent, ran: &Ran) -> Result<Answer, HookError> {
    let mut answer = Answer::default();
    match ran.code {
        Some(0) => {}
        Some(2) => {
            let stderr = ran.stderr.trim();
            answer.block = Some(if stderr.is_empty() {
                format!(
                    "blocked by a {} hook (exit status 2, no message)",
                    event.name()
                )
            } else {
                stderr.to_string()
            });
            return Ok(answer);
        }
        Some(code) => {
            return Err(HookError::raised(format!(
                "exited with status {code}: {}",
                ran.stderr.trim()
            )))
        }
        None => return Err(HookError::raised("was killed by a signal")),
    }
    let stdout = ran.stdout.trim();
    if !stdout.starts_with('{') {
        if !stdout.is_empty() {
            answer.plain = Some(stdout.to_string());
        }
        return Ok(answer);
    }
    let json: Map<String, Value> = match serde_json::from_str(stdout) {
        Ok(Value::Object(m)) => m,
        Ok(_) => unreachable!("text starting with {{ parses to an object"),
        Err(e) => {
            return Err(HookError::raised(format!(
                "printed invalid JSON on stdout: {e}"
            )))
        }
    };
    let text =
        |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
    if json.get("continue") == Some(&Value::Bool(false)) {
        answer.stop = Some(
            text(&json, "stopReason")
                .unwrap_or_else(|| format!("stopped by a {} hook", event.name())),
        );
    }
    if let Some(m) = text(&json, "systemMessage") {
        tracing::warn!("{} hook: {m}", event.name());
    }
    let reason = text(&json, "reason");
    if json.get("decision").and_then(Value::as_str) == Some("block") {
        answer.block =
            Some(reason.unwrap_or_else(|| format!("blocked by a {} hook", event.name())));
    }
    if let Some(Value::Object(specific)) = json.get("hookSpecificOutput") {
        let why = text(specific, "permissionDecisionReason").unwrap_or_default();
        match specific.get("permissionDecision").and_then(Value::as_str) {
            Some("deny") => {
                answer.block = Some(if why.is_empty() {
                    "denied by a PreToolUse hook".into()
                } else {
                    why
                })
            }
            Some("ask") => {
                answer.block = Some(format!(
                    "a PreToolUse hook asks for the user's approval, which plughost does not ask for: refused{}",
                    if why.is_empty() { String::new() } else { format!(" ({why})") }
                ))
            }
            _ => {}
        }
        if let Some(c) = text(specific, "additionalContext") {
            answer.context.push(c);
        }
        if let Some(input) = specific.get("updatedInput") {
            answer.updated_input = Some(input.clone());
        }
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matchers_follow_claude_code() {
        assert!(Matcher::parse("").unwrap().admits("Bash"));
        assert!(Matcher::parse("*").unwrap().admits("Read"));
        let m = Matcher::parse("Edit|Write").unwrap();
        assert!(m.admits("Write") && !m.admits("WriteX") && !m.admits("Bash"));
        let m = Matcher::parse("Notebook.*").unwrap();
        assert!(m.admits("NotebookEdit") && !m.admits("Bash"));
        assert!(Matcher::parse("mcp__.*").unwrap().admits("mcp__s__t"));
        assert!(Matcher::parse("(").is_err());
    }

    #[test]
    fn if_rules_match_name_and_prefix() {
        let input = json!({"command": "git commit -m x"});
        assert!(rule_admits("Bash(git commit:*)", "Bash", &input));
        assert!(!rule_admits("Bash(git push:*)", "Bash", &input));
        assert!(rule_admits("Bash", "Bash", &input));
        assert!(!rule_admits("Edit", "Bash", &input));
    }

    fn ran(code: i32, stdout: &str, stderr: &str) -> Ran {
        Ran {
            code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
        }
    }

    #[test]
    fn exits_and_json_answers_read_as_claude_code_reads_them() {
        let e = ClaudeEvent::PreToolUse;
        assert_eq!(
            read_answer(e, &ran(2, "", "no rm\n"))
                .unwrap()
                .block
                .as_deref(),
            Some("no rm")
        );
        assert!(read_answer(e, &ran(1, "", "oops")).is_err());
        assert!(read_answer(e, &ran(0, "{not json", "")).is_err());
        assert_eq!(read_answer(e, &ran(0, "", "")).unwrap(), Answer::default());
        let deny = r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "not here"}}"#;
        assert_eq!(
            read_answer(e, &ran(0, deny, "")).unwrap().block.as_deref(),
            Some("not here")
        );
        let stop = r#"{"continue": false, "stopReason": "enough"}"#;
        assert_eq!(
            read_answer(e, &ran(0, stop, "")).unwrap().stop.as_deref(),
            Some("enough")
        );
        let ctx = r#"{"hookSpecificOutput": {"additionalContext": "ctx"}}"#;
        assert_eq!(
            read_answer(ClaudeEvent::UserPromptSubmit, &ran(0, ctx, ""))
                .unwrap()
                .context,
            vec!["ctx".to_string()]
        );
        assert_eq!(
            read_answer(ClaudeEvent::SessionStart, &ran(0, "hello\n", ""))
                .unwrap()
                .plain
                .as_deref(),
            Some("hello")
        );
    }

    #[test]
    fn a_config_reads_events_matchers_and_timeouts_and_reports_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("hooks")).unwrap();
        std::fs::write(
            dir.path().join("hooks/hooks.json"),
            json!({"description": "d", "hooks": {
                "PreToolUse": [{"matcher": "Bash", "hooks": [
                    {"type": "command", "command": "x", "timeout": 5},
                    {"type": "prompt", "prompt": "p"}]}],
                "Notification": [{"hooks": [{"type": "command", "command": "y"}]}],
                "Stop": [{"hooks": [{"type": "command", "command": "z"}]}]
            }})
            .to_string(),
        )
        .unwrap();
        let mut diags = Vec::new();
        let hooks = read(dir.path(), &Map::new(), &mut diags);
        assert_eq!(hooks.len(), 2, "{diags:?}");
        assert_eq!(hooks[0].event, ClaudeEvent::PreToolUse);
        assert_eq!(hooks[0].timeout, Duration::from_secs(5));
        assert_eq!(hooks[1].timeout, DEFAULT_TIMEOUT);
        assert!(
            diags.iter().any(|d| d.contains("'prompt' hook")),
            "{diags:?}"
        );
        assert!(
            diags.iter().any(|d| d.contains("Notification")),
            "{diags:?}"
        );
    }
}
