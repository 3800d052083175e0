//! Hermes's result strings: every failure is a JSON object with an `error`
//! key (`tools/registry.py`), so a Hermes tool's caller parses one shape.

use serde_json::json;

use crate::core::outcome::{seconds_text, ArgumentProblem, Renderer, ToolOutcome};

/// How long an error message Hermes lets through.
const MAX_ERROR_CHARS: usize = 2048;

/// Renders outcomes of Hermes tools as Hermes's error JSON.
#[derive(Clone, Copy, Debug, Default)]
pub struct HermesRenderer;

fn error_json(message: String) -> String {
    let message = if message.chars().count() > MAX_ERROR_CHARS {
        let mut cut: String = message.chars().take(MAX_ERROR_CHARS).collect();
        cut.push('…');
        cut
    } else {
        message
    };
    json!({ "error": message }).to_string()
}

impl Renderer for HermesRenderer {
    fn render(&self, tool: &str, outcome: &ToolOutcome) -> String {
        match outcome {
            ToolOutcome::Ok => String::new(),
            // A native failure (the handler's result was not a JSON string)
            // is Hermes's own message; a Python exception is "execution failed".
            ToolOutcome::Raised { error } if error.kind.is_empty() => {
                error_json(error.message.clone())
            }
            ToolOutcome::Raised { error } => {
                error_json(format!("Tool execution failed: {}", error.described()))
            }
            ToolOutcome::Unavailable { .. } => error_json(format!(
                "Tool {tool} is unavailable (its check_fn returned False or a required environment variable is unset)"
            )),
            ToolOutcome::CheckFailed { error } => error_json(format!(
                "Tool {tool} is unavailable (its check_fn raised {})",
                error.described()
            )),
            ToolOutcome::Blocked { message } => error_json(message.clone()),
            ToolOutcome::InvalidArguments { problem } => error_json(match problem {
                ArgumentProblem::NotJson => format!("Invalid arguments for {tool}: not valid JSON"),
                ArgumentProblem::NotAnObject { got } => {
                    format!("Invalid arguments for {tool}: expected a JSON object, got {got}")
                }
                ArgumentProblem::Schema { problem } => {
                    format!("Invalid arguments for {tool}: {problem}")
                }
            }),
            ToolOutcome::NotFound => error_json(format!("Unknown tool: {tool}")),
            ToolOutcome::TimedOut { after } => error_json(format!(
                "Tool execution failed: timed out after {} s",
                seconds_text(*after)
            )),
            ToolOutcome::Cancelled => {
                error_json("Tool execution failed: the call was cancelled".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::outcome::PluginError;

    #[test]
    fn hermes_error_shapes() {
        let r = HermesRenderer;
        assert_eq!(
            r.render("t", &ToolOutcome::NotFound),
            r#"{"error":"Unknown tool: t"}"#
        );
        let raised = ToolOutcome::Raised {
            error: PluginError {
                kind: "ValueError".into(),
                message: "bad".into(),
                ..Default::default()
            },
        };
        assert_eq!(
            r.render("t", &raised),
            r#"{"error":"Tool execution failed: ValueError: bad"}"#
        );
        let long = ToolOutcome::Blocked {
            message: "x".repeat(5000),
        };
        let v: serde_json::Value = serde_json::from_str(&r.render("t", &long)).unwrap();
        assert_eq!(
            v["error"].as_str().unwrap().chars().count(),
            MAX_ERROR_CHARS + 1
        );
    }
}
