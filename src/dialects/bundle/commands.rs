//! Claude Code slash commands: `commands/**/*.md` of a plugin, each the
//! command `/<plugin>:<file stem>` (Claude Code's namespaced name; the
//! bare `/<stem>` is not registered, so two plugins cannot collide).
//!
//! A command is a prompt: typed in `run`, `chat` or `serve`, the line is
//! replaced by the command's prompt before the agent reads it (on the core
//! lane of [`Point::InboundMessage`](crate::core::hooks::Point)), and the
//! turn runs on it. `commands run` and MCP's `prompts/get` return the
//! prompt itself. The frontmatter's `description` and `argument-hint` are
//! what `/help` and `prompts/list` show.
//!
//! The body, as Claude Code expands it: `$ARGUMENTS` is everything after
//! the name, `$1` … `$9` its whitespace-separated words (quotes group);
//! with no `$ARGUMENTS` in the body, arguments given are appended as
//! `ARGUMENTS: …`. `` !`cmd` `` runs `cmd` through `sh -c` in the current
//! directory and puts its output there, when the frontmatter's
//! `allowed-tools` grants it (`Bash`, or `Bash(git status:*)` for commands
//! starting `git status`); otherwise the command is refused, naming the
//! line. `@path` (a word starting with `@` naming a file under the current
//! directory) is replaced by the file's text. `allowed-tools` grants
//! nothing else (plughost asks no permissions) and `model` is not used
//! (Claude Code's model names are not plughost's providers); both are read
//! and reported by `plugins doctor`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::core::hooks::{
    HookAction, HookCallback, HookEvent, HookPayload, HookReturn, LoopDecision, LoopEdit,
};
use crate::core::outcome::PluginError;
use crate::core::registry::{CommandHandler, CommandReturn};

/// How long one `` !`cmd` `` may run.
const SHELL_TIMEOUT: Duration = Duration::from_secs(30);

/// One command file.
#[derive(Clone, Debug)]
pub struct PromptCommand {
    /// `plugin:stem`.
    pub name: String,
    pub description: String,
    pub argument_hint: String,
    pub allowed_tools: Vec<String>,
    pub model: Option<String>,
    pub body: String,
    pub path: PathBuf,
}

/// A YAML frontmatter and the text after it (no frontmatter: empty map).
pub fn split_frontmatter(text: &str) -> Result<(Map<String, Value>, String), String> {
    let text = text.trim_start_matches('\u{feff}');
    let Some(rest) = text.strip_prefix("---") else {
        return Ok((Map::new(), text.to_string()));
    };
    let Some(end) = rest.find("\n---") else {
        return Err("unterminated YAML frontmatter".into());
    };
    let yaml = &rest[..end];
    let after = &rest[end + 4..];
    let body = after.split_once('\n').map_or("", |(_, b)| b).to_string();
    let fm = match serde_saphyr::from_str::<Value>(yaml) {
        Ok(Value::Object(m)) => m,
        Ok(Value::Null) => Map::new(),
        Ok(_) => return Err("YAML frontmatter must be a mapping".into()),
        // Claude Code reads frontmatter leniently (`key: value` lines): so do we.
        Err(_) => lenient(yaml),
    };
    Ok((fm, body))
}

/// `key: value` lines, for frontmatter that is not valid YAML (an unquoted
/// `description: Use when: …`).
fn lenient(yaml: &str) -> Map<String, Value> {
    yaml.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| !k.starts_with(' ') && !k.trim().is_empty())
        .map(|(k, v)| (k.trim().to_string(), Value::String(v.trim().to_string())))
        .collect()
}

/// A frontmatter list: a YAML list, or a comma-separated string.
pub fn list(fm: &Map<String, Value>, key: &str) -> Option<Vec<String>> {
    match fm.get(key)? {
        Value::Array(items) => Some(
            items
                .iter()
                .filter_map(|v| v.as_str().map(|s| s.trim().to_string()))
                .collect(),
        ),
        Value::String(s) => Some(
            split_rules(s)
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect(),
        ),
        _ => None,
    }
}

/// Split `Bash(git add:*), Bash(git status:*), Read` at the commas outside
/// parentheses.
fn split_rules(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur).trim().to_string());
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur.trim().to_string());
    out
}

fn text(fm: &Map<String, Value>, key: &str) -> Option<String> {
    match fm.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// The commands of the plugin `plugin` at `root`: `commands/**/*.md`.
pub fn read(root: &Path, plugin: &str, diagnostics: &mut Vec<String>) -> Vec<PromptCommand> {
    let mut files = Vec::new();
    collect_md(&root.join("commands"), &mut files);
    let mut out: Vec<PromptCommand> = Vec::new();
    for Markdown {
        path,
        stem,
        fm,
        body,
    } in parsed_markdown(files, "command", diagnostics)
    {
        let name = format!("{plugin}:{stem}");
        if out.iter().any(|c| c.name == name) {
            diagnostics.push(format!(
                "command:{stem}: a second file of that name; left out"
            ));
            continue;
        }
        let description = text(&fm, "description").unwrap_or_else(|| {
            body.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or_default()
                .trim_start_matches('#')
                .trim()
                .chars()
                .take(100)
                .collect()
        });
        out.push(PromptCommand {
            name,
            description,
            argument_hint: text(&fm, "argument-hint").unwrap_or_default(),
            allowed_tools: list(&fm, "allowed-tools").unwrap_or_default(),
            model: text(&fm, "model"),
            body,
            path,
        });
    }
    out
}

/// A command's or agent's file, read: its name from the file, its
/// frontmatter and its body.
pub(super) struct Markdown {
    pub path: PathBuf,
    pub stem: String,
    pub fm: Map<String, Value>,
    pub body: String,
}

/// Each of `files`, in name order, read and split; a file that cannot be
/// read or parsed is reported in `diagnostics` as `kind:stem: why` and
/// left out.
pub(super) fn parsed_markdown(
    mut files: Vec<PathBuf>,
    kind: &str,
    diagnostics: &mut Vec<String>,
) -> Vec<Markdown> {
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| split_frontmatter(&t));
        match parsed {
            Ok((fm, body)) => out.push(Markdown {
                path,
                stem,
                fm,
                body,
            }),
            Err(e) => diagnostics.push(format!("{kind}:{stem}: {e}")),
        }
    }
    out
}

fn collect_md(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            collect_md(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// Words of `args`, as a shell splits them (single and double quotes group).
fn words(args: &str) -> Vec<String> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in args.chars() {
        match (quote, c) {
            (None, '"' | '\'') => {
                quote = Some(c);
                any = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (_, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

impl PromptCommand {
    /// The prompt for `args`: placeholders, `@file`s and `` !`cmd` ``s
    /// expanded; `Err` names what plughost refused to run.
    pub fn expand(&self, args: &str) -> Result<String, String> {
        let mut body = self.body.clone();
        // Arguments with no placeholder to go to are appended, as Claude Code does.
        let had_arguments =
            body.contains("$ARGUMENTS") || (1..=9).any(|n| body.contains(&format!("${n}")));
        body = body.replace("$ARGUMENTS", args);
        let words = words(args);
        for n in (1..=9).rev() {
            let value = words.get(n - 1).map(String::as_str).unwrap_or("");
            body = body.replace(&format!("${n}"), value);
        }
        body = self.shell_lines(&body)?;
        body = files(&body);
        if !had_arguments && !args.trim().is_empty() {
            body = format!("{}\n\nARGUMENTS: {}", body.trim_end(), args.trim());
        }
        Ok(body.trim().to_string())
    }

    /// Every `` !`cmd` `` replaced by its output, when allowed.
    fn shell_lines(&self, body: &str) -> Result<String, String> {
        let mut out = String::with_capacity(body.len());
        let mut rest = body;
        while let Some(at) = rest.find("!`") {
            let after = &rest[at + 2..];
            let Some(end) = after.find('`') else { break };
            let command = &after[..end];
            let input = serde_json::json!({ "command": command });
            if !self
                .allowed_tools
                .iter()
                .any(|rule| super::hooks::rule_admits(rule, "Bash", &input))
            {
                return Err(format!(
                    "/{}: its line !`{command}` runs a shell command, which its allowed-tools ({}) does not grant; plughost does not run it",
                    self.name,
                    if self.allowed_tools.is_empty() { "none".to_string() } else { self.allowed_tools.join(", ") }
                ));
            }
            out.push_str(&rest[..at]);
            out.push_str(&run_shell(command)?);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

fn run_shell(command: &str) -> Result<String, String> {
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{command}`: {e}"))?;
    let started = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() > SHELL_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{command}` ran past {} s",
                    SHELL_TIMEOUT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("`{command}`: {e}")),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("`{command}`: {e}"))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(text.trim_end().to_string())
}

/// `@path` words naming files under the current directory replaced by
/// their text.
fn files(body: &str) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    let word = |w: &str| -> String {
        let Some(path) = w.strip_prefix('@') else {
            return w.to_string();
        };
        let path = path.trim_end_matches(['.', ',', ';', ':', ')']);
        let relative = Path::new(path);
        let climbs = relative
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
        if path.is_empty() || relative.is_absolute() || climbs {
            return w.to_string();
        }
        match std::fs::read_to_string(cwd.join(relative)) {
            Ok(content) => format!("\n<file path=\"{path}\">\n{content}\n</file>\n"),
            Err(_) => w.to_string(),
        }
    };
    body.split('\n')
        .map(|line| line.split(' ').map(word).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The command's handler for `commands run` and MCP's `prompts/get`: its
/// prompt; and, in the agent, the reply when the prompt could not be made.
pub struct PromptHandler(pub Arc<PromptCommand>);

impl CommandHandler for PromptHandler {
    fn call(&self, raw_args: &str) -> CommandReturn {
        CommandReturn::Ready(
            self.0
                .expand(raw_args)
                .map(Some)
                .map_err(PluginError::native),
        )
    }
}

/// The plugin's commands on the inbound message's lane: a line naming one
/// becomes its prompt. One callback per plugin.
pub struct Rewrite(pub Vec<Arc<PromptCommand>>);

impl HookCallback for Rewrite {
    fn call(&self, _event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let HookPayload::Loop(lc) = payload else {
            return HookReturn::Ready(Ok(HookAction::Continue));
        };
        let Some(line) = lc.text.trim_start().strip_prefix('/') else {
            return HookReturn::Ready(Ok(HookAction::Continue));
        };
        let (name, args) = crate::core::commands::split_line(line);
        let Some(command) = self.0.iter().find(|c| c.name == name) else {
            return HookReturn::Ready(Ok(HookAction::Continue));
        };
        // A prompt that cannot be made leaves the line: the agent runs it
        // as the command, whose reply says why.
        HookReturn::Ready(Ok(match command.expand(args) {
            Ok(prompt) => HookAction::Decide(LoopDecision::Edit(LoopEdit::Text(prompt))),
            Err(_) => HookAction::Continue,
        }))
    }

    fn native(&self, _event: HookEvent) -> bool {
        true
    }

    fn event_name(&self, _event: HookEvent) -> Option<String> {
        Some("commands".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(body: &str, allowed: &[&str]) -> PromptCommand {
        PromptCommand {
            name: "p:c".into(),
            description: String::new(),
            argument_hint: String::new(),
            allowed_tools: allowed.iter().map(|s| s.to_string()).collect(),
            model: None,
            body: body.into(),
            path: PathBuf::new(),
        }
    }

    #[test]
    fn arguments_positions_and_appended_arguments() {
        let c = command("Fix issue $1 with $2: $ARGUMENTS", &[]);
        assert_eq!(
            c.expand("42 \"high prio\"").unwrap(),
            "Fix issue 42 with high prio: 42 \"high prio\""
        );
        let c = command("Fix #$1.", &[]);
        assert_eq!(c.expand("42 more").unwrap(), "Fix #42.");
        let c = command("Review the code.", &[]);
        assert_eq!(
            c.expand("src/").unwrap(),
            "Review the code.\n\nARGUMENTS: src/"
        );
        assert_eq!(c.expand("").unwrap(), "Review the code.");
    }

    #[test]
    fn shell_lines_run_only_when_allowed() {
        let c = command("Status: !`echo ok`", &["Bash(echo:*)"]);
        assert_eq!(c.expand("").unwrap(), "Status: ok");
        let c = command("Status: !`echo ok`", &["Bash(git status:*)"]);
        let e = c.expand("").unwrap_err();
        assert!(
            e.contains("!`echo ok`") && e.contains("does not grant"),
            "{e}"
        );
    }

    #[test]
    fn frontmatter_lists_and_lenient_yaml() {
        let (fm, body) = split_frontmatter(
            "---\nallowed-tools: Bash(git add:*), Bash(git status:*)\ndescription: Use when: x\n---\nBody\n",
        )
        .unwrap();
        assert_eq!(
            list(&fm, "allowed-tools").unwrap(),
            vec!["Bash(git add:*)", "Bash(git status:*)"]
        );
        assert_eq!(fm["description"], "Use when: x");
        assert_eq!(body, "Body\n");
        assert_eq!(words("a 'b c' \"\""), vec!["a", "b c", ""]);
    }
}
