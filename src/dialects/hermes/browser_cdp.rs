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
//!
//! Waiting after an action follows the page's own navigation events
//! (`Page.frameRequestedNavigation`, `frameStartedLoading`,
//! `frameStoppedLoading`, `navigatedWithinDocument` of the main frame), not
//! a pause: a click that submits a form is waited for until the next
//! document has loaded, however slow the machine, and one that navigates
//! nowhere is not waited for at all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long one CDP command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

type Sink = SplitSink<WebSocketStream<MaybeTlsStream<TcpStream>>, Message>;
type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;

/// How long a navigation the page asked for may take to start before the
/// action counts as done (a download, or one the page cancelled).
const START_GRACE: Duration = Duration::from_secs(5);

/// The main frame's navigation events so far, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Navigations {
    /// Navigations of this tab the page asked for (a link, a form, a script).
    requested: u64,
    /// Loads started.
    started: u64,
    /// Loads finished.
    finished: u64,
    /// Navigations within the document (a fragment, `history.pushState`).
    within: u64,
    /// Whether a load is under way.
    loading: bool,
}

impl Navigations {
    /// Count one CDP event, if it is the main frame's.
    fn count(&mut self, method: &str, params: &Value, main_frame: &str) {
        if params["frameId"].as_str() != Some(main_frame) {
            return;
        }
        match method {
            "Page.frameRequestedNavigation"
                if params["disposition"].as_str().unwrap_or("currentTab") == "currentTab" =>
            {
                self.requested += 1
            }
            "Page.frameStartedLoading" => {
                self.started += 1;
                self.loading = true;
            }
            "Page.frameStoppedLoading" => {
                self.finished += 1;
                self.loading = false;
            }
            "Page.navigatedWithinDocument" => self.within += 1,
            _ => {}
        }
    }
}

/// One page of a browser, driven over its CDP websocket.
pub struct Page {
    sink: tokio::sync::Mutex<Sink>,
    waiters: Waiters,
    next: AtomicU64,
    /// The attached page's session (`None`: the endpoint is the page).
    session: Option<String>,
    /// The page's navigation events, as the reader counts them.
    navigations: watch::Receiver<Navigations>,
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
        let main_frame: Arc<OnceLock<String>> = Arc::default();
        let frame = Arc::clone(&main_frame);
        let (counted, navigations) = watch::channel(Navigations::default());
        let reader = tokio::spawn(async move {
            while let Some(Ok(message)) = source.next().await {
                let Message::Text(text) = message else {
                    continue;
                };
                let Ok(reply) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                let Some(id) = reply["id"].as_u64() else {
                    if let (Some(method), Some(frame)) = (reply["method"].as_str(), frame.get()) {
                        counted.send_if_modified(|n| {
                            let before = *n;
                            n.count(method, &reply["params"], frame);
                            *n != before
                        });
                    }
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
            navigations,
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
        page.send("Page.enable", json!({})).await?;
        let tree = page.send("Page.getFrameTree", json!({})).await?;
        let id = tree["frameTree"]["frame"]["id"]
            .as_str()
            .ok_or("the browser did not say which frame is the page's")?;
        let _ = main_frame.set(id.to_string());
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

    /// The navigation events counted so far: taken before an action, and
    /// given to [`Page::settle`] after it.
    pub fn navigations(&self) -> Navigations {
        *self.navigations.borrow()
    }

    /// Wait for what the page did since `before`: nothing if it asked for
    /// no navigation; else until the next document has loaded.
    pub async fn settle(&self, before: Navigations) -> Result<(), String> {
        let asked = {
            let now = self.navigations.borrow();
            now.requested > before.requested || now.started > before.started
        };
        if !asked {
            return Ok(());
        }
        // Asked for, but it may never start (a download, a cancelled one).
        let mut events = self.navigations.clone();
        let started = events.wait_for(|n| n.started > before.started || n.within > before.within);
        let started = tokio::time::timeout(START_GRACE, started)
            .await
            .map(|r| r.is_ok());
        match started {
            Err(_) => Ok(()),
            Ok(false) => Err("the browser connection closed".into()),
            Ok(true) => self.loaded(before).await,
        }
    }

    /// Wait until a navigation begun after `before` has loaded its document
    /// (or moved within it), bounded by `COMMAND_TIMEOUT`.
    pub async fn loaded(&self, before: Navigations) -> Result<(), String> {
        let mut events = self.navigations.clone();
        let done = events.wait_for(|n| {
            n.within > before.within
                || (n.started > before.started && n.finished > before.finished && !n.loading)
        });
        let done = tokio::time::timeout(COMMAND_TIMEOUT, done)
            .await
            .map(|r| r.is_ok());
        match done {
            Err(_) => Err("the page did not finish loading".into()),
            Ok(false) => Err("the browser connection closed".into()),
            Ok(true) => Ok(()),
        }
    }

    /// Go to the previous page of this tab's history and wait until it is
    /// the page shown and has loaded; an error if there is none.
    pub async fn back(&self) -> Result<(), String> {
        let history = self.send("Page.getNavigationHistory", json!({})).await?;
        let target = history["currentIndex"]
            .as_u64()
            .and_then(|i| i.checked_sub(1))
            .ok_or("there is no previous page in this tab's history")?;
        let entry = &history["entries"][target as usize];
        self.send(
            "Page.navigateToHistoryEntry",
            json!({"entryId": entry["id"]}),
        )
        .await?;
        // A page from the back-forward cache fires no load events: follow
        // the history's own index, then the document's state. While the
        // page changes renderer the commands fail ("Not attached to an
        // active page"): that is "not yet".
        let deadline = tokio::time::Instant::now() + COMMAND_TIMEOUT;
        loop {
            let shown = self.send("Page.getNavigationHistory", json!({})).await;
            if matches!(&shown, Ok(h) if h["currentIndex"].as_u64() == Some(target)) {
                let state = self.evaluate("document.readyState").await;
                if matches!(&state, Ok(Value::String(s)) if s == "complete") {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err("the previous page did not finish loading".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
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
