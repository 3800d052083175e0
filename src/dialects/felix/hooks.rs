//! Felix's calling conventions: hooks called positionally as
//! `hook(value, ctx)` (`after_tool(tool_call, result, is_error, ctx)`,
//! startup hooks `hook(app)`), sync or async, their answers turned into the
//! loop points' typed decisions; and Felix tools run through their
//! executor, failures rendered `[error/<code>] <exc>`.
//!
//! The value conversions and the reading of answers live in the Python
//! half (`_plughost_felix`), where `ChatMessage` is; an answer of the wrong
//! shape raises its `Mistake`, which is reported with its own sentence
//! (`answered {'deny': True} without a 'block' key; treated as allow`) and
//! ignored: hooks fail open.

use pyo3::prelude::*;
use pyo3::types::PyModule;
use serde_json::{json, Map, Value};

use crate::core::hooks::ToolCallContext;
use crate::core::hooks::{
    HookAction, HookCallback, HookError, HookEvent, HookPayload, HookReturn, LoopContext,
    LoopDecision, LoopEdit, ResultPatch,
};
use crate::core::outcome::{PluginError, Renderer, StandardRenderer, ToolOutcome};
use crate::core::registry::{ToolHandler, ToolReturn};
use crate::runtime::bridge::{self, Awaited};
use crate::runtime::{plugin_error, try_attach};

/// One Felix hook of one kind.
pub struct FelixHook {
    pub kind: String,
    pub callback: Py<PyAny>,
    pub felix: Py<PyModule>,
}

/// What a hook of this kind is shown, as plain values.
fn payload_of(ctx: &LoopContext) -> Value {
    json!({
        "messages": ctx.messages,
        "kept": ctx.kept,
        "tools": ctx.tools.iter().map(|t| t["function"]["name"].clone()).collect::<Vec<_>>(),
        "reply": ctx.reply,
        "stop_reason": ctx.stop_reason,
        "tool_call": {"id": ctx.tool_call.id, "name": ctx.tool_call.name, "args": ctx.tool_call.arguments},
        "result": ctx.result,
        "is_error": ctx.is_error,
        "error": ctx.error,
    })
}

/// Felix's `ctx`: `manifest_id` and `thread_id`; model hooks add
/// `model_id` and `purpose` (always `turn`).
fn ctx_of(kind: &str, ctx: &LoopContext) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "manifest_id".into(),
        json!(if ctx.delegate { "delegate" } else { "main" }),
    );
    m.insert("thread_id".into(), json!(ctx.session_id));
    if matches!(kind, "before_model" | "after_model") {
        m.insert("model_id".into(), json!(ctx.model));
        m.insert("purpose".into(), json!("turn"));
    }
    m
}

fn raised(py: Python<'_>, felix: &Bound<'_, PyModule>, e: &PyErr) -> HookError {
    let mistake = felix
        .getattr("Mistake")
        .is_ok_and(|m| e.is_instance(py, &m));
    if mistake {
        // A wrong-shape answer: reported with its own sentence.
        let text = e.value(py).str().map(|s| s.to_string()).unwrap_or_default();
        HookError::Raised(PluginError::native(text))
    } else {
        HookError::Raised(plugin_error(py, e))
    }
}

/// `after_tool`'s answer (a dict) as a patch of the call's result
/// `original`: `content` replaces it (a tagged failure keeps its tag in
/// front), a truthy `terminate` marks the call.
fn after_tool_patch(value: Value, original: &str) -> ResultPatch {
    let Value::Object(map) = value else {
        return ResultPatch::default();
    };
    ResultPatch {
        result: map
            .get("content")
            .map(|c| c.as_str().map(|c| keep_failure_tag(original, c))),
        terminate: map.get("terminate").map(truthy),
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// The failure or refusal tag a result starts with (`[error/timeout]`,
/// `[tool error/…]`, `[policy …]`, `[fatal/…]`), if any.
pub fn failure_tag(text: &str) -> Option<&str> {
    let end = text.find(']')?;
    let inner = text.strip_prefix('[')?.get(..end - 1)?;
    ["error/", "tool error/", "policy ", "fatal/"]
        .iter()
        .any(|p| inner.starts_with(p))
        .then(|| &text[..=end])
}

/// A replacement of a tagged failure keeps the tag in front (Felix's rule:
/// the call still counts as a failure for the model and for eval).
pub fn keep_failure_tag(original: &str, replacement: &str) -> String {
    match failure_tag(original) {
        Some(tag) if failure_tag(replacement).is_none() => format!("{tag} {replacement}"),
        _ => replacement.to_string(),
    }
}

/// The answer `(what, value)` of `interpret` as a bus action; `original`
/// is the result an `after_tool` hook was shown.
fn action_of(what: &str, value: Value, original: &str) -> Result<HookAction, HookError> {
    let decide = |d| Ok(HookAction::Decide(d));
    let messages = |v: Value| match v {
        Value::Array(a) => a,
        _ => Vec::new(),
    };
    match what {
        "none" => Ok(HookAction::Continue),
        "messages" => decide(LoopDecision::Edit(LoopEdit::Messages(messages(value)))),
        "append" => decide(LoopDecision::Append(messages(value))),
        "reply" => decide(LoopDecision::Edit(LoopEdit::Reply(value))),
        "block" => {
            let reason = value["reason"].as_str().unwrap_or_default().to_string();
            decide(LoopDecision::Refuse {
                text: format!("[error/blocked] {reason}"),
                reason,
                terminate: value["terminate"].as_bool().unwrap_or(false),
            })
        }
        "merge" => decide(LoopDecision::Merge(after_tool_patch(value, original))),
        "cancel" => decide(LoopDecision::CancelCompaction),
        "summary" => decide(LoopDecision::Summary(
            value.as_str().unwrap_or_default().to_string(),
        )),
        other => Err(HookError::raised(format!(
            "plughost's Felix adapter answered an unknown kind '{other}'"
        ))),
    }
}

fn interpret(
    py: Python<'_>,
    felix: &Bound<'_, PyModule>,
    kind: &str,
    ret: &Bound<'_, PyAny>,
    original: &str,
) -> Result<HookAction, HookError> {
    if kind == "startup_hook" || kind == "compact_failed" {
        return Ok(HookAction::Continue); // notifications: the answer is not read
    }
    let answer = felix
        .getattr("interpret")
        .and_then(|f| f.call1((kind, ret)))
        .map_err(|e| raised(py, felix, &e))?;
    let (what, value): (String, Bound<'_, PyAny>) =
        answer.extract().map_err(|e| raised(py, felix, &e))?;
    let value: Value = if value.is_none() {
        Value::Null
    } else {
        pythonize::depythonize(&value).map_err(|e| HookError::raised(e.to_string()))?
    };
    action_of(&what, value, original)
}

impl HookCallback for FelixHook {
    fn call(&self, _event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        let HookPayload::Loop(ctx) = payload else {
            return HookReturn::Ready(Err(HookError::NotRun(
                "a Felix hook fires only at loop points".into(),
            )));
        };
        let kind = self.kind.clone();
        // What an `after_tool` answer's `content` replaces (see `after_tool_patch`).
        let original = ctx.result.clone();
        let called = try_attach(|py| {
            let felix = self.felix.bind(py);
            let args = if kind == "startup_hook" {
                let tools: Vec<String> = ctx
                    .tools
                    .iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                    .collect();
                felix
                    .getattr("App")
                    .and_then(|app| app.call1((ctx.plugins.clone(), tools)))
                    .map(|app| pyo3::types::PyTuple::new(py, [app]))
                    .and_then(|t| t)
                    .map(|t| t.into_any())
            } else {
                let payload = pythonize::pythonize(py, &payload_of(ctx));
                let c = pythonize::pythonize(py, &Value::Object(ctx_of(&kind, ctx)));
                match (payload, c) {
                    (Ok(p), Ok(c)) => felix
                        .getattr("args_for")
                        .and_then(|f| f.call1((&kind, p, c))),
                    (Err(e), _) | (_, Err(e)) => {
                        return HookReturn::Ready(Err(HookError::raised(e.to_string())))
                    }
                }
            };
            let called = args.and_then(|a| {
                let tuple = a.cast_into::<pyo3::types::PyTuple>()?;
                self.callback.bind(py).call1(tuple)
            });
            match called {
                Err(e) => HookReturn::Ready(Err(raised(py, felix, &e))),
                Ok(ret) => match bridge::resolve(py, ret) {
                    Awaited::Ready(Ok(v)) => {
                        HookReturn::Ready(interpret(py, felix, &kind, v.bind(py), &original))
                    }
                    Awaited::Ready(Err(e)) => HookReturn::Ready(Err(raised(py, felix, &e))),
                    Awaited::Pending(task) => {
                        let felix = self.felix.clone_ref(py);
                        let original = original.clone();
                        HookReturn::Pending(Box::pin(async move {
                            let r = task.await;
                            try_attach(|py| {
                                let felix = felix.bind(py);
                                match r {
                                    Ok(v) => interpret(py, felix, &kind, v.bind(py), &original),
                                    Err(e) => Err(raised(py, felix, &e)),
                                }
                            })
                            .unwrap_or_else(|e| Err(HookError::NotRun(e.to_string())))
                        }))
                    }
                },
            }
        });
        called.unwrap_or_else(|e| HookReturn::Ready(Err(HookError::NotRun(e.to_string()))))
    }

    fn event_name(&self, _event: HookEvent) -> Option<String> {
        Some(self.kind.clone())
    }
}

/// A Felix tool: run through its executor (`define_tool`'s validates, then
/// calls `handler(parsed, ctx)` or `handler(parsed)`).
pub struct FelixTool {
    pub tool: Py<PyAny>,
    pub felix: Py<PyModule>,
    /// `define_tool(fatal=True)`: a failure ends the turn (Felix's react loop).
    pub fatal: bool,
}

/// The result of a finished Felix tool call.
fn finished(
    py: Python<'_>,
    felix: &Bound<'_, PyModule>,
    tool: &Bound<'_, PyAny>,
    r: PyResult<Bound<'_, PyAny>>,
) -> Result<String, PluginError> {
    match r {
        Ok(ret) => {
            let (text, is_error): (String, bool) = felix
                .getattr("tool_text")
                .and_then(|f| f.call1((ret,)))
                .and_then(|t| t.extract())
                .map_err(|e| plugin_error(py, &e))?;
            if is_error {
                Err(PluginError {
                    kind: "ToolError".into(),
                    message: text,
                    ..Default::default()
                })
            } else {
                Ok(text)
            }
        }
        Err(e) => {
            let mut error = plugin_error(py, &e);
            // Felix's text: `[error/<code>] <exc>` (`[fatal/…]` for a fatal tool).
            if let Ok(text) = felix
                .getattr("error_text")
                .and_then(|f| f.call1((tool, e.value(py))))
                .and_then(|t| t.extract::<String>())
            {
                error.message = text;
            }
            Err(error)
        }
    }
}

impl ToolHandler for FelixTool {
    /// Felix's tool runner: only a raised exception (caught with its
    /// traceback) is fatal, never a returned `tool_error_output`.
    fn fatal(&self, error: &PluginError) -> bool {
        self.fatal && error.traceback.is_some()
    }

    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        let called = try_attach(|py| {
            let felix = self.felix.bind(py);
            let tool = self.tool.bind(py);
            // Converted where they stand: the call's one copy is Python's.
            let awaitable = pythonize::pythonize(py, &ctx.params)
                .map_err(PyErr::from)
                .and_then(|args| {
                    felix.getattr("call_tool").and_then(|f| {
                        f.call1((tool, args, &ctx.session_id, &ctx.tool_call_id, ctx.delegate))
                    })
                });
            let awaitable = match awaitable {
                Ok(a) => a,
                Err(e) => return ToolReturn::Ready(finished(py, felix, tool, Err(e))),
            };
            match bridge::resolve(py, awaitable) {
                Awaited::Ready(r) => {
                    let r = r.map(|v| v.into_bound(py));
                    ToolReturn::Ready(finished(py, felix, tool, r))
                }
                Awaited::Pending(task) => {
                    let felix = self.felix.clone_ref(py);
                    let tool = self.tool.clone_ref(py);
                    ToolReturn::Pending(Box::pin(async move {
                        let r = task.await;
                        try_attach(|py| {
                            let r = r.map(|v| v.into_bound(py));
                            finished(py, felix.bind(py), tool.bind(py), r)
                        })
                        .unwrap_or_else(|e| Err(PluginError::native(e.to_string())))
                    }))
                }
            }
        });
        called.unwrap_or_else(|e| ToolReturn::Ready(Err(PluginError::native(e.to_string()))))
    }

    fn reads_rust_params(&self) -> bool {
        true
    }
}

/// Felix's result strings: a failed tool shows its own text
/// (`[error/<code>] <exc>`); every other outcome keeps plughost's.
pub struct FelixRenderer;

impl Renderer for FelixRenderer {
    fn render(&self, tool: &str, outcome: &ToolOutcome) -> String {
        match outcome {
            ToolOutcome::Raised { error } => error.message.clone(),
            other => StandardRenderer.render(tool, other),
        }
    }
}
