//! What the gateway tests and bench share: a small chat service on
//! loopback (line-delimited JSON over TCP) that a Hermes platform plugin
//! written here, in the shape of Hermes's own adapters (IRC's), connects
//! to; the plugin's home; and `plughost serve` started on it.
//!
//! The service's protocol: a client (the adapter) says
//! `{"op":"hello","pid":N}`, then sends `{"op":"send"|"edit",…,"req":n}`
//! and gets `{"op":"ack","req":n,"message_id":…}`; the service delivers
//! users' messages as `{"op":"msg","chat_id","chat_type","user","text","id"}`
//! to one connected client (as a platform delivers each update once), and
//! reactions as `{"op":"react","chat_id","user","message_id","emoji"}`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

/// The adapter, as Hermes's plugin adapters are written.
pub const ADAPTER: &str = include_str!("adapter.py");

/// The plugin: the platform, a tool and a gateway policy beside it.
pub const PLUGIN: &str = include_str!("plugin.py");

pub const MANIFEST: &str = "name: fakechat-platform\nlabel: FakeChat\nkind: platform\nversion: 1.0.0\nrequires_env:\n  - name: FAKECHAT_PORT\n";

/// Each session's first message calls `lookup`; later ones are echoed.
pub fn script(dir: &Path) -> PathBuf {
    let mut text = String::from(
        "turns:\n  - tool_calls:\n      - name: lookup\n        args: {q: \"{user_message}\"}\n  - say: \"re: {user_message} {tool_results}\"\n",
    );
    for _ in 0..400 {
        text.push_str("  - say: \"re: {user_message}\"\n");
    }
    let path = dir.join("script.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A plughost home with the plugin enabled, and a Hermes home enabling
/// the platform on `port` (reconnecting after 50 ms).
pub fn homes(port: u16) -> (tempfile::TempDir, tempfile::TempDir) {
    let home = crate::common::home_with(&["fakechat-platform"]);
    crate::common::write_plugin(
        &home.path().join("plugins"),
        "fakechat",
        MANIFEST,
        &[("__init__.py", PLUGIN), ("adapter.py", ADAPTER)],
    );
    let hermes = tempfile::tempdir().unwrap();
    std::fs::write(
        hermes.path().join("config.yaml"),
        format!(
            "platforms:\n  fakechat:\n    enabled: true\n    extra:\n      port: {port}\ngateway:\n  reconnect_delay: 0.05\n  reconnect_max_delay: 0.2\n"
        ),
    )
    .unwrap();
    (home, hermes)
}

/// One `plughost serve` with the gateway; killed when dropped.
pub struct Serve {
    pub child: Child,
    pub url: String,
    pub stderr: std::sync::mpsc::Receiver<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `plughost serve` on `home`, Hermes's home `hermes`, the scripted model
/// replaying `script`, sessions in `pg_url` (else files), the plugin
/// in-process (isolated in the parity pass, `PLUGHOST_TEST_ISOLATE=all`).
pub fn serve(home: &Path, hermes: &Path, script: &Path, log: &Path, pg_url: Option<&str>) -> Serve {
    let isolate = if crate::common::isolate_all() {
        "all"
    } else {
        "none"
    };
    serve_with(home, hermes, script, log, pg_url, &["--isolate", isolate])
}

/// [`serve`] with `isolate` (`--isolate …`, or nothing: serve's default).
pub fn serve_with(
    home: &Path,
    hermes: &Path,
    script: &Path,
    log: &Path,
    pg_url: Option<&str>,
    isolate: &[&str],
) -> Serve {
    let sessions: Vec<&str> = pg_url.map(|u| vec!["--sessions", u]).unwrap_or_default();
    let bundled = home.join("no-bundled");
    std::fs::create_dir_all(&bundled).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home)
        .args(isolate)
        .args(["serve", "--port", "0", "--model", "scripted", "--script"])
        .arg(script)
        .args(&sessions)
        .env("PLUGHOST_BUNDLED_DIR", &bundled)
        .env("HERMES_HOME", hermes)
        .env("GATEWAY_TEST_LOG", log)
        .env_remove("FAKECHAT_PORT")
        .env_remove("PLUGHOST_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("PLUGHOST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (url, rx, _) = crate::common::serve_lines(&mut child);
    Serve {
        child,
        url,
        stderr: rx,
    }
}

/// What the service saw, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen {
    /// A client connected (its index) from process `pid`.
    Hello { conn: usize, pid: u64 },
    /// A message delivered to client `conn`.
    Delivered {
        conn: usize,
        chat: String,
        id: String,
    },
    /// A client sent `text` to `chat` (`id` is the message's).
    Sent {
        conn: usize,
        chat: String,
        text: String,
        reply_to: Option<String>,
        id: String,
    },
    Edited {
        chat: String,
        id: String,
        text: String,
    },
}

struct Client {
    conn: usize,
    out: mpsc::UnboundedSender<String>,
    close: CancellationToken,
}

#[derive(Default)]
struct State {
    clients: Vec<Client>,
    seen: Vec<Seen>,
    next_id: u64,
    next_conn: usize,
}

/// The fake chat service.
#[derive(Clone)]
pub struct ChatService {
    pub port: u16,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

impl ChatService {
    /// Listen on a loopback port (call inside a tokio runtime).
    pub async fn start() -> ChatService {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let service = ChatService {
            port,
            state: Arc::default(),
            changed: Arc::default(),
        };
        let accepting = service.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let _ = socket.set_nodelay(true);
                accepting.serve_client(socket);
            }
        });
        service
    }

    fn serve_client(&self, socket: tokio::net::TcpStream) {
        let (read, mut write) = socket.into_split();
        let (out, mut outgoing) = mpsc::unbounded_channel::<String>();
        let close = CancellationToken::new();
        let conn = {
            let mut state = self.state.lock().unwrap();
            state.next_conn += 1;
            state.next_conn - 1
        };
        let closing = close.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    line = outgoing.recv() => match line {
                        Some(line) => if write.write_all(line.as_bytes()).await.is_err() { break },
                        None => break,
                    },
                    _ = closing.cancelled() => break,
                }
            }
            let _ = write.shutdown().await;
        });
        let service = self.clone();
        let (reply, closing) = (out.clone(), close.clone());
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(read).lines();
            loop {
                let line = tokio::select! {
                    l = lines.next_line() => l,
                    _ = closing.cancelled() => break,
                };
                let Ok(Some(line)) = line else { break };
                let v: Value = serde_json::from_str(&line).unwrap();
                service.on_request(conn, &v, &reply);
            }
        });
        self.state
            .lock()
            .unwrap()
            .clients
            .push(Client { conn, out, close });
    }

    fn on_request(&self, conn: usize, v: &Value, reply: &mpsc::UnboundedSender<String>) {
        let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        let mut state = self.state.lock().unwrap();
        match v["op"].as_str().unwrap() {
            "hello" => state.seen.push(Seen::Hello {
                conn,
                pid: v["pid"].as_u64().unwrap(),
            }),
            "send" => {
                state.next_id += 1;
                let id = format!("s{}", state.next_id);
                state.seen.push(Seen::Sent {
                    conn,
                    chat: text("chat_id"),
                    text: text("text"),
                    reply_to: v["reply_to"].as_str().map(str::to_string),
                    id: id.clone(),
                });
                let ack = json!({"op": "ack", "req": v["req"], "message_id": id});
                let _ = reply.send(format!("{ack}\n"));
            }
            "edit" => {
                state.seen.push(Seen::Edited {
                    chat: text("chat_id"),
                    id: text("message_id"),
                    text: text("text"),
                });
                let ack = json!({"op": "ack", "req": v["req"], "ok": true});
                let _ = reply.send(format!("{ack}\n"));
            }
            other => panic!("unknown op {other}"),
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// Deliver a user's message to client `conn` (the latest when `None`).
    pub fn deliver(&self, conn: Option<usize>, chat: &str, user: &str, text: &str, id: &str) {
        let mut state = self.state.lock().unwrap();
        let client = match conn {
            Some(c) => state.clients.iter().find(|x| x.conn == c),
            None => state.clients.iter().rev().find(|x| !x.close.is_cancelled()),
        }
        .expect("no such client");
        let line = json!({"op": "msg", "chat_id": chat, "chat_type": "dm", "user": user, "text": text, "id": id});
        client.out.send(format!("{line}\n")).unwrap();
        let conn = client.conn;
        state.seen.push(Seen::Delivered {
            conn,
            chat: chat.into(),
            id: id.into(),
        });
    }

    /// A user's reaction to message `id` of `chat`, to the latest client.
    pub fn react(&self, chat: &str, user: &str, id: &str, emoji: &str) {
        let state = self.state.lock().unwrap();
        let client = state
            .clients
            .iter()
            .rev()
            .find(|x| !x.close.is_cancelled())
            .expect("no client");
        let line =
            json!({"op": "react", "chat_id": chat, "user": user, "message_id": id, "emoji": emoji});
        client.out.send(format!("{line}\n")).unwrap();
    }

    /// Close every client's connection (the platform dropping the bot).
    pub fn drop_clients(&self) {
        let mut state = self.state.lock().unwrap();
        for c in state.clients.drain(..) {
            c.close.cancel();
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// Wait (at most `limit`) until `done` holds of what was seen.
    pub async fn wait_for(
        &self,
        limit: Duration,
        what: &str,
        done: impl Fn(&[Seen]) -> bool,
    ) -> Vec<Seen> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.changed.notified();
            let seen = self.seen();
            if done(&seen) {
                return seen;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let seen = self.seen();
                if done(&seen) {
                    return seen;
                }
                panic!("timed out waiting for {what}; the service saw {seen:#?}");
            }
        }
    }

    /// Wait (at most `limit`) until `n` clients have connected.
    pub async fn wait_connected(&self, limit: Duration, n: usize) -> Vec<Seen> {
        self.wait_for(limit, &format!("{n} adapter(s) to connect"), |s| {
            s.iter().filter(|x| matches!(x, Seen::Hello { .. })).count() >= n
        })
        .await
    }

    /// The clients connected (`Hello`s) so far.
    pub fn hellos(&self) -> usize {
        self.seen()
            .iter()
            .filter(|s| matches!(s, Seen::Hello { .. }))
            .count()
    }
}

/// The texts sent to `chat`, in order.
pub fn sent_to(seen: &[Seen], chat: &str) -> Vec<String> {
    seen.iter()
        .filter_map(|s| match s {
            Seen::Sent { chat: c, text, .. } if c == chat => Some(text.clone()),
            _ => None,
        })
        .collect()
}
