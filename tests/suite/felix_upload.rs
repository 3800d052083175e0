//! Request bodies stream into a plugin's ASGI application (issue: the
//! server side of plugins, item 1): a route reading `request.stream()`
//! sees the first chunk of an upload while the client still holds the
//! rest, a client that goes away mid-body reaches it as
//! `http.disconnect` (Starlette's `ClientDisconnect`), and a chunked body
//! past the plugin's `body_limit_bytes` is answered 413. Raw HTTP/1.1 on a
//! TCP socket, so the test decides exactly when each chunk is sent.
use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A Felix plugin whose route notes each chunk of the body as it reads it.
const PLUGIN: &str = r#"
import os
LOG = os.path.join(os.environ["PLUGHOST_HOME_FOR_TEST"], "upload.log")

def note(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")

class Upload:
    name = "upload"

    def register_tools(self, register):
        pass

    def routes(self, app, *, tools):
        from fastapi import APIRouter, Request
        from starlette.requests import ClientDisconnect

        router = APIRouter()

        @router.post("/up/stream")
        async def stream(request: Request):
            total = 0
            try:
                async for chunk in request.stream():
                    if chunk:
                        total += len(chunk)
                        note(f"chunk {chunk.decode()}" if len(chunk) < 100 else f"got {total}")
            except ClientDisconnect:
                note("disconnected")
                raise
            note("end")
            return {"len": total}

        app.include_router(router)

    @property
    def body_limit_bytes(self):
        return 4000

def register(registry):
    registry.register_plugin(Upload())
"#;

struct Server {
    child: Child,
    addr: String,
    home: tempfile::TempDir,
    _bundled: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("upload.log")).unwrap_or_default()
    }

    /// Wait until the plugin has noted `line`.
    fn wait_for(&self, line: &str) {
        common::wait_until(
            &format!("the route to note {line:?}"),
            Duration::from_secs(30),
            || self.log().lines().any(|l| l == line),
        );
    }

    /// A connection with the head of a chunked POST to `/up/stream` sent.
    fn upload(&self) -> TcpStream {
        let mut tcp = TcpStream::connect(&self.addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            tcp,
            "POST /up/stream HTTP/1.1\r\nHost: {}\r\nTransfer-Encoding: chunked\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        tcp
    }
}

/// `plughost serve` on a home whose one (trusted) plugin is the Felix
/// source tree above; the server's own body limit is lower than the plugin's.
fn serve() -> Server {
    let home = common::trusted_home(&["upload"]);
    common::felix_tree(home.path(), "upload", PLUGIN);
    let bundled = common::no_bundled();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home.path())
        .args([
            "serve",
            "--port",
            "0",
            "--model",
            "scripted",
            "--max-body-bytes",
            "1024",
        ])
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("PLUGHOST_HOME_FOR_TEST", home.path())
        .env_remove("PLUGHOST_LOG")
        .env_remove("PYTHONPATH")
        .env_remove("PLUGHOST_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = common::serve_url(&mut child);
    let addr = url.trim_start_matches("http://").to_string();
    Server {
        child,
        addr,
        home,
        _bundled: bundled,
    }
}

/// The status code and text of the answer, read to the end of the
/// connection (or to a reset: a server refusing a body closes with the
/// rest of it unread, which resets the connection after its answer).
fn answer(mut tcp: TcpStream) -> (u16, String) {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading the answer: {e}"),
        }
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    (status, text)
}

fn chunk(data: &str) -> String {
    format!("{:x}\r\n{data}\r\n", data.len())
}

#[test]
fn the_first_chunk_reaches_the_route_before_the_rest_is_sent() {
    common::require_fastapi();
    let server = serve();
    let mut tcp = server.upload();
    tcp.write_all(chunk("first").as_bytes()).unwrap();
    // Held back until the application has read the first chunk: a server
    // that read the body whole before calling it would wait here forever.
    server.wait_for("chunk first");
    tcp.write_all(format!("{}0\r\n\r\n", chunk("second")).as_bytes())
        .unwrap();
    let (status, text) = answer(tcp);
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with(r#"{"len":11}"#), "{text}");
    assert_eq!(server.log(), "chunk first\nchunk second\nend\n");
}

#[test]
fn a_client_gone_mid_body_is_a_disconnect_for_the_route() {
    common::require_fastapi();
    let server = serve();
    let mut tcp = server.upload();
    tcp.write_all(chunk("first").as_bytes()).unwrap();
    server.wait_for("chunk first");
    tcp.shutdown(std::net::Shutdown::Both).unwrap();
    drop(tcp);
    server.wait_for("disconnected");
    assert!(!server.log().contains("end"), "{}", server.log());
    // The server goes on serving.
    let mut tcp = server.upload();
    tcp.write_all(format!("{}0\r\n\r\n", chunk("again")).as_bytes())
        .unwrap();
    let (status, text) = answer(tcp);
    assert_eq!(status, 200, "{text}");
}

#[test]
fn a_chunked_body_past_the_plugins_limit_is_refused_with_413() {
    common::require_fastapi();
    let server = serve();
    let mut tcp = server.upload();
    // Under the plugin's 4000 bytes (over the server's own 1024): served.
    let part = "x".repeat(3000);
    tcp.write_all(format!("{}0\r\n\r\n", chunk(&part)).as_bytes())
        .unwrap();
    let (status, text) = answer(tcp);
    assert_eq!(status, 200, "{text}");
    // Past it, with no Content-Length to refuse up front: cut while it
    // streams, and answered 413 whatever the route made of the cut.
    let mut tcp = server.upload();
    tcp.write_all(chunk(&part).as_bytes()).unwrap();
    common::wait_until(
        "the route to read the first 3000 bytes twice",
        Duration::from_secs(30),
        || server.log().lines().filter(|l| *l == "got 3000").count() == 2,
    );
    // The server may answer and close before it reads this: both are fine.
    let _ = tcp.write_all(format!("{}0\r\n\r\n", chunk(&part)).as_bytes());
    let (status, text) = answer(tcp);
    assert_eq!(status, 413, "{text}");
    assert!(
        text.contains("the request body is over the limit of 4000 bytes"),
        "{text}"
    );
}
