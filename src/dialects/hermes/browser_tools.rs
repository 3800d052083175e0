//! The `browser_*` tools Hermes offers (`tools/browser_tool.py`,
//! `BROWSER_TOOL_SCHEMAS`), backed by the active browser provider: a
//! session's first call asks the provider for a browser
//! (`create_session(task_id)`, Hermes's metadata dict), whose `cdp_url` the
//! tools then drive over CDP ([`super::browser_cdp`]); `browser_close` and
//! the session's end release it (`close_session(bb_session_id)`), and a host
//! dropped with sessions open calls `emergency_cleanup` for each.
//!
//! Results are Hermes's JSON envelopes (`{"success": true, …}`, or
//! `{"success": false, "error": …}`). The snapshot is made in the page
//! (interactive elements get refs `@e1`, `@e2`, … that `browser_click` and
//! `browser_type` take), truncated at Hermes's 8000 characters.
//!
//! Not offered: `browser_vision`, which needs a vision model plughost does
//! not host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use serde_json::{json, Map, Value};

use crate::core::hooks::ToolCallContext;
use crate::core::registry::{Tool, ToolHandler, ToolReturn, ToolSpec};
use crate::runtime::{plugin_error, try_attach};

use super::browser_cdp::Page;

/// Hermes's snapshot limit.
const SNAPSHOT_LIMIT: usize = 8000;

/// One session's browser: the page and the provider's session id.
struct Open {
    page: Arc<Page>,
    provider_session: String,
}

/// The active provider and the browsers it gave out, by task.
pub struct Browsers {
    pub plugin: String,
    pub name: String,
    provider: Py<PyAny>,
    open: tokio::sync::Mutex<HashMap<String, Open>>,
    /// Provider session ids still open (for `emergency_cleanup` on drop).
    ids: Mutex<Vec<String>>,
}

impl Drop for Browsers {
    fn drop(&mut self) {
        let ids = std::mem::take(&mut *self.ids.lock().unwrap_or_else(|e| e.into_inner()));
        if ids.is_empty() {
            return;
        }
        let _ = try_attach(|py| {
            for id in ids {
                let _ = self
                    .provider
                    .bind(py)
                    .call_method1("emergency_cleanup", (id,));
            }
        });
    }
}

impl Browsers {
    pub fn new(plugin: &str, name: &str, provider: Py<PyAny>) -> Browsers {
        Browsers {
            plugin: plugin.into(),
            name: name.into(),
            provider,
            open: Default::default(),
            ids: Mutex::default(),
        }
    }

    /// `provider.method(arg)` on a blocking thread, as JSON.
    async fn provider_call(
        self: &Arc<Self>,
        method: &'static str,
        arg: String,
    ) -> Result<Value, String> {
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            try_attach(|py| {
                let answer = me
                    .provider
                    .bind(py)
                    .call_method1(method, (arg,))
                    .map_err(|e| plugin_error(py, &e).described())?;
                crate::runtime::value::to_json(&answer).map_err(|e| e.to_string())
            })
            .map_err(|_| "the interpreter is shutting down".to_string())?
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// The task's page, made on first use.
    async fn page(self: &Arc<Self>, task: &str) -> Result<Arc<Page>, String> {
        let mut open = self.open.lock().await;
        if let Some(o) = open.get(task) {
            return Ok(Arc::clone(&o.page));
        }
        let meta = self
            .provider_call("create_session", task.to_string())
            .await?;
        let url = meta["cdp_url"]
            .as_str()
            .filter(|u| !u.is_empty())
            .ok_or_else(|| format!("browser provider '{}' returned no cdp_url", self.name))?;
        let provider_session = match &meta["bb_session_id"] {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        let page = Arc::new(Page::open(url).await?);
        self.ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(provider_session.clone());
        open.insert(
            task.to_string(),
            Open {
                page: Arc::clone(&page),
                provider_session,
            },
        );
        Ok(page)
    }

    /// Release the task's browser (`close_session`); whether one was open.
    pub async fn close(self: &Arc<Self>, task: &str) -> Result<bool, String> {
        let Some(o) = self.open.lock().await.remove(task) else {
            return Ok(false);
        };
        drop(o.page);
        self.ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|id| *id != o.provider_session);
        self.provider_call("close_session", o.provider_session)
            .await?;
        Ok(true)
    }

    /// Release the task's browser from a synchronous caller (the session's
    /// end), before it returns; while a call of the task holds its browser,
    /// on the runtime once that call is done.
    pub fn close_now(self: &Arc<Self>, task: &str) {
        let taken = match self.open.try_lock() {
            Ok(mut open) => open.remove(task),
            Err(_) => {
                let me = Arc::clone(self);
                let task = task.to_string();
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    handle.spawn(async move {
                        if let Err(e) = me.close(&task).await {
                            tracing::warn!(
                                "browser provider '{}': close_session failed: {e}",
                                me.name
                            );
                        }
                    });
                }
                return;
            }
        };
        let Some(o) = taken else { return };
        drop(o.page);
        self.ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|id| *id != o.provider_session);
        let _ = try_attach(|py| {
            let closed = self
                .provider
                .bind(py)
                .call_method1("close_session", (o.provider_session.as_str(),));
            if let Err(e) = closed {
                let error = plugin_error(py, &e);
                tracing::warn!(
                    "browser provider '{}': close_session raised {}",
                    self.name,
                    error.described()
                );
            }
        });
    }
}

/// The tools, in Hermes's order.
const OPS: [&str; 9] = [
    "browser_navigate",
    "browser_snapshot",
    "browser_click",
    "browser_type",
    "browser_scroll",
    "browser_back",
    "browser_press",
    "browser_close",
    "browser_get_images",
];

/// Hermes's schema of tool `name`: `(description, parameters)`.
fn schema(name: &str) -> (&'static str, Value) {
    let none = json!({"type": "object", "properties": {}, "required": []});
    let reference = |example: &str| json!({"type": "string", "description": format!("The element reference from the snapshot (e.g., '{example}')")});
    match name {
        "browser_navigate" => ("Navigate to a URL in the browser. Initializes the session and loads the page. Must be called before other browser tools. For simple information retrieval, prefer web_search or web_extract (faster, cheaper). Use browser tools when you need to interact with a page (click, fill forms, dynamic content).",
            json!({"type": "object", "properties": {"url": {"type": "string", "description": "The URL to navigate to (e.g., 'https://example.com')"}}, "required": ["url"]})),
        "browser_snapshot" => ("Get a text-based snapshot of the current page's accessibility tree. Returns interactive elements with ref IDs (like @e1, @e2) for browser_click and browser_type. full=false (default): compact view with interactive elements. full=true: complete page content. Snapshots over 8000 chars are truncated or LLM-summarized. Requires browser_navigate first.",
            json!({"type": "object", "properties": {"full": {"type": "boolean", "description": "If true, returns complete page content. If false (default), returns compact view with interactive elements only.", "default": false}}, "required": []})),
        "browser_click" => ("Click on an element identified by its ref ID from the snapshot (e.g., '@e5'). The ref IDs are shown in square brackets in the snapshot output. Requires browser_navigate and browser_snapshot to be called first.",
            json!({"type": "object", "properties": {"ref": {"type": "string", "description": "The element reference from the snapshot (e.g., '@e5', '@e12')"}}, "required": ["ref"]})),
        "browser_type" => ("Type text into an input field identified by its ref ID. Clears the field first, then types the new text. Requires browser_navigate and browser_snapshot to be called first.",
            json!({"type": "object", "properties": {"ref": reference("@e3"), "text": {"type": "string", "description": "The text to type into the field"}}, "required": ["ref", "text"]})),
        "browser_scroll" => ("Scroll the page in a direction. Use this to reveal more content that may be below or above the current viewport. Requires browser_navigate to be called first.",
            json!({"type": "object", "properties": {"direction": {"type": "string", "enum": ["up", "down"], "description": "Direction to scroll"}}, "required": ["direction"]})),
        "browser_back" => ("Navigate back to the previous page in browser history. Requires browser_navigate to be called first.", none),
        "browser_press" => ("Press a keyboard key. Useful for submitting forms (Enter), navigating (Tab), or keyboard shortcuts. Requires browser_navigate to be called first.",
            json!({"type": "object", "properties": {"key": {"type": "string", "description": "Key to press (e.g., 'Enter', 'Tab', 'Escape', 'ArrowDown')"}}, "required": ["key"]})),
        "browser_close" => ("Close the browser session and release resources. Call this when done with browser tasks to free up Browserbase session quota.", none),
        _ => ("Get a list of all images on the current page with their URLs and alt text. Useful for finding images to analyze with the vision tool. Requires browser_navigate to be called first.", none),
    }
}

/// The registry tools over `browsers`.
pub fn tools(browsers: &Arc<Browsers>) -> Vec<Tool> {
    OPS.iter()
        .map(|op| {
            let (description, parameters) = schema(op);
            Tool::new(
                ToolSpec {
                    name: (*op).to_string(),
                    description: description.to_string(),
                    parameters,
                    plugin: browsers.plugin.clone(),
                    toolset: "browser".into(),
                    ..Default::default()
                },
                Arc::new(BrowserTool {
                    browsers: Arc::clone(browsers),
                    op,
                }),
            )
        })
        .collect()
}

struct BrowserTool {
    browsers: Arc<Browsers>,
    op: &'static str,
}

impl ToolHandler for BrowserTool {
    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        let browsers = Arc::clone(&self.browsers);
        let op = self.op;
        let args = ctx.params.clone();
        let task = [&ctx.task_id, &ctx.session_id]
            .into_iter()
            .find(|t| !t.is_empty())
            .cloned()
            .unwrap_or_else(|| "default".into());
        ToolReturn::Pending(Box::pin(async move {
            let answer = match run(&browsers, op, &task, &args).await {
                Ok(mut v) => {
                    v["success"] = Value::Bool(true);
                    v
                }
                Err(e) => json!({"success": false, "error": e}),
            };
            Ok(answer.to_string())
        }))
    }
}

fn text<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{key} is required"))
}

/// A ref as the snapshot shows it (`@e5`), as the page marks it (`e5`).
fn reference(args: &Map<String, Value>) -> Result<String, String> {
    let r = text(args, "ref")?.trim();
    let r = r.trim_start_matches('@').trim_start_matches("ref=");
    if r.is_empty() || !r.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(format!("'{r}' is not a ref from the snapshot (e.g. @e5)"));
    }
    Ok(r.to_string())
}

async fn run(
    b: &Arc<Browsers>,
    op: &str,
    task: &str,
    args: &Map<String, Value>,
) -> Result<Value, String> {
    if op == "browser_close" {
        let closed = b.close(task).await?;
        return Ok(json!({"closed": closed}));
    }
    let page = b.page(task).await?;
    match op {
        "browser_navigate" => {
            let url = text(args, "url")?;
            let before = page.navigations();
            let nav = page.send("Page.navigate", json!({"url": url})).await?;
            if let Some(e) = nav["errorText"].as_str().filter(|e| !e.is_empty()) {
                return Err(format!("navigation to {url} failed: {e}"));
            }
            page.loaded(before).await?;
            let at = page
                .evaluate("({url: location.href, title: document.title})")
                .await?;
            Ok(json!({"url": at["url"], "title": at["title"]}))
        }
        "browser_snapshot" => {
            let full = args.get("full").and_then(Value::as_bool).unwrap_or(false);
            let out = page.evaluate(&format!("({SNAPSHOT_JS})({full})")).await?;
            let mut snapshot = out["text"].as_str().unwrap_or_default().to_string();
            if snapshot.len() > SNAPSHOT_LIMIT {
                let mut cut = SNAPSHOT_LIMIT;
                while !snapshot.is_char_boundary(cut) {
                    cut -= 1;
                }
                snapshot.truncate(cut);
                snapshot.push_str("\n[... snapshot truncated ...]");
            }
            Ok(json!({"snapshot": snapshot, "element_count": out["count"]}))
        }
        "browser_click" => {
            let r = reference(args)?;
            let before = page.navigations();
            page.evaluate(&format!("{FIND}('{r}').click()")).await?;
            page.settle(before).await?;
            Ok(json!({"clicked": format!("@{r}")}))
        }
        "browser_type" => {
            let r = reference(args)?;
            let typed = text(args, "text")?;
            let value = serde_json::to_string(typed).unwrap_or_default();
            let script = format!(
                "(() => {{ const el = {FIND}('{r}'); el.focus(); el.value = {value}; \
                 el.dispatchEvent(new Event('input', {{bubbles: true}})); \
                 el.dispatchEvent(new Event('change', {{bubbles: true}})); }})()"
            );
            page.evaluate(&script).await?;
            Ok(json!({"typed": typed, "element": format!("@{r}")}))
        }
        "browser_scroll" => {
            let direction = text(args, "direction")?;
            let sign = match direction {
                "up" => "-",
                "down" => "",
                other => return Err(format!("direction must be up or down, not '{other}'")),
            };
            page.evaluate(&format!(
                "window.scrollBy(0, {sign}window.innerHeight * 0.8)"
            ))
            .await?;
            Ok(json!({"scrolled": direction}))
        }
        "browser_back" => {
            page.back().await?;
            let url = page.evaluate("location.href").await?;
            Ok(json!({"url": url}))
        }
        "browser_press" => {
            let key = text(args, "key")?;
            let before = page.navigations();
            page.press(key).await?;
            page.settle(before).await?;
            Ok(json!({"pressed": key}))
        }
        _ => {
            let images = page
                .evaluate("Array.from(document.images).map(i => ({src: i.src, alt: i.alt || ''}))")
                .await?;
            let count = images.as_array().map_or(0, Vec::len);
            Ok(json!({"images": images, "count": count}))
        }
    }
}

/// The element a ref names, or a thrown error the model can act on.
const FIND: &str = "((r) => { const el = document.querySelector(`[data-plughost-ref=\"${r}\"]`); \
    if (!el) throw new Error(`no element @${r} on this page; take a new browser_snapshot`); return el; })";

/// The page as text: headings and interactive elements (each given a ref),
/// and with `full` the text of the page's blocks too.
const SNAPSHOT_JS: &str = r#"(full) => {
  const lines = []; let n = 0;
  const interactive = 'a[href],button,input,select,textarea,summary,[role=button],[role=link],[role=checkbox],[role=textbox],[onclick]';
  const role = (el) => {
    const r = el.getAttribute('role'); if (r) return r;
    const t = el.tagName.toLowerCase();
    if (t === 'a') return 'link';
    if (t === 'input') { const k = (el.type || 'text').toLowerCase();
      return k === 'checkbox' ? 'checkbox' : k === 'radio' ? 'radio' : (k === 'submit' || k === 'button') ? 'button' : 'textbox'; }
    if (t === 'textarea') return 'textbox';
    if (t === 'select') return 'combobox';
    return t === 'summary' ? 'button' : t;
  };
  const label = (el) => (el.getAttribute('aria-label') || (el.labels && el.labels[0] && el.labels[0].innerText)
    || el.innerText || el.value || el.placeholder || el.alt || el.name || el.title || '').trim().replace(/\s+/g, ' ').slice(0, 100);
  document.querySelectorAll('[data-plughost-ref]').forEach(el => el.removeAttribute('data-plughost-ref'));
  const walk = (el) => {
    if (!(el instanceof Element)) return;
    const style = window.getComputedStyle(el);
    if (style.display === 'none' || style.visibility === 'hidden') return;
    const tag = el.tagName.toLowerCase();
    if (/^h[1-6]$/.test(tag)) { lines.push(`- heading "${label(el)}" [level=${tag[1]}]`); return; }
    if (el.matches(interactive)) {
      const ref = 'e' + (++n); el.setAttribute('data-plughost-ref', ref);
      lines.push(`- ${role(el)} "${label(el)}" [ref=@${ref}]`); return;
    }
    if (full && /^(p|li|td|th|pre|blockquote|label|span|div)$/.test(tag)) {
      const own = Array.from(el.childNodes).filter(c => c.nodeType === 3).map(c => c.textContent.trim()).join(' ').trim();
      if (own) lines.push(`- text: ${own.replace(/\s+/g, ' ')}`);
    }
    for (const child of el.children) walk(child);
  };
  walk(document.body);
  return {text: lines.join('\n'), count: n};
}"#;
