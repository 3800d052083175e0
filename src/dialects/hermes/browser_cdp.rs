//! A Chrome DevTools Protocol client over one websocket: what the
//! `browser_*` tools ([`super::browser_tools`]) drive a provider's browser
//! session with, where Hermes shells out to the `agent-browser` CLI with
//! the session's `cdp_url`.
//!
//! The URL a provider returns is usually the browser's own endpoint
//! (`/devtools/browser/…`): a page is opened on it (`Target.createTarget`)
//! and attached in flat mode, and every command then carries that page's
//! `sessionId`. An endpoint that is already a page (no `Target` domain)
//! is driven directly.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long one CDP command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

type Sink = SplitSink<WebSocketStream<MaybeTlsStream<TcpStream>>, Message>;
type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;

/// One page of a browser, driven over its CDP websocket.
pub struct Page {
    sink: tokio::sync::Mutex<Sink>,
    waiters: Waiters,
    next: AtomicU64,
    /// The attached page's session (`None`: the endpoint is the page).
    session: Option<String>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Page {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Page {
    /// Connect to `url` and open a page on it.
    pub async fn open(url: &str) -> Result<Page, String> {
        let (stream, _) =
            tokio::time::timeout(COMMAND_TIMEOUT, tokio_tungstenite::connect_async(url))
                .await
                .map_err(|_| format!("connecting to the browser at {url} timed out"))?
                .map_err(|e| format!("cannot connect to the browser at {url}: {e}"))?;
        let (sink, mut source) = stream.split();
        let waiters: Waiters = Arc::default();
        let pending = Arc::clone(&waiters);
        let reader = tokio::spawn(async move {
            while let Some(Ok(message)) = source.next().await {
                let Message::Text(text) = message else {
                    continue;
                };
                let Ok(reply) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                let Some(id) = reply["id"].as_u64() else {
                    continue;
                };
                let waiter = pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                if let Some(waiter) = waiter {
                    let outcome = match reply.get("error") {
                        Some(e) => Err(e["message"].as_str().unwrap_or("CDP error").to_string()),
                        None => Ok(reply["result"].clone()),
                    };
                    let _ = waiter.send(outcome);
                }
            }
            // The socket closed: every waiter gets its error.
            pending.lock().unwrap_or_else(|e| e.into_inner()).clear();
        });
        let mut page = Page {
            sink: tokio::sync::Mutex::new(sink),
            waiters,
            next: AtomicU64::new(1),
            session: None,
            reader,
        };
        let created = page
            .send("Target.createTarget", json!({"url": "about:blank"}))
            .await;
        if let Ok(target) = created {
            let attached = page
                .send(
                    "Target.attachToTarget",
                    json!({"targetId": target["targetId"], "flatten": true}),
                )
                .await?;
            page.session = attached["sessionId"].as_str().map(str::to_string);
        }
        Ok(page)
    }

    /// One CDP command and its result.
    pub async fn send(&self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut command = json!({"id": id, "method": method, "params": params});
        if let Some(session) = &self.session {
            command["sessionId"] = Value::from(session.as_str());
        }
        let (tx, rx) = oneshot::channel();
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        self.sink
            .lock()
            .await
            .send(Message::text(command.to_string()))
            .await
            .map_err(|e| format!("the browser connection failed: {e}"))?;
        match tokio::time::timeout(COMMAND_TIMEOUT, rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err("the browser connection closed".into()),
            Err(_) => {
                self.waiters
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                Err(format!("{method} timed out"))
            }
        }
    }

    /// `expression` evaluated in the page (promises awaited), its value.
    pub async fn evaluate(&self, expression: &str) -> Result<Value, String> {
        let result = self
            .send(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await?;
        if let Some(details) = result.get("exceptionDetails") {
            let text = details["exception"]["description"]
                .as_str()
                .or(details["text"].as_str())
                .unwrap_or("the page's script failed");
            return Err(text.to_string());
        }
        Ok(result["result"]["value"].clone())
    }

    /// Wait until the document has loaded (bounded by [`COMMAND_TIMEOUT`]).
    pub async fn settle(&self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + COMMAND_TIMEOUT;
        // A navigation just asked for may not have replaced the old document yet.
        tokio::time::sleep(Duration::from_millis(50)).await;
        loop {
            let state = self.evaluate("document.readyState").await;
            if matches!(&state, Ok(Value::String(s)) if s == "complete") {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err("the page did not finish loading".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A key pressed and released (`Input.dispatchKeyEvent`).
    pub async fn press(&self, key: &str) -> Result<(), String> {
        let (code, text) = match key {
            "Enter" => (13, "\r"),
            "Tab" => (9, ""),
            "Escape" => (27, ""),
            "Backspace" => (8, ""),
            "ArrowUp" => (38, ""),
            "ArrowDown" => (40, ""),
            "ArrowLeft" => (37, ""),
            "ArrowRight" => (39, ""),
            k if k.chars().count() == 1 => (0, k),
            _ => (0, ""),
        };
        let mut down = json!({"type": "keyDown", "key": key, "windowsVirtualKeyCode": code});
        if !text.is_empty() {
            down["text"] = Value::from(text);
        }
        self.send("Input.dispatchKeyEvent", down).await?;
        let up = json!({"type": "keyUp", "key": key, "windowsVirtualKeyCode": code});
        self.send("Input.dispatchKeyEvent", up).await?;
        Ok(())
    }
}
