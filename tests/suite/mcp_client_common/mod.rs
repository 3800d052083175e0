//! What the MCP client tests share: a Python with the official `mcp`
//! package, and the small MCP server `server.py` written with it (stdio,
//! or streamable HTTP on a loopback port).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server's source (tests copy it into their temporary home).
pub const SERVER: &str = include_str!("server.py");

/// A Python that imports `mcp`: `$PLUGHOST_TEST_MCP_PYTHON` (what
/// `tests/run_all.sh` sets up), else `python3`. `None`, with the reason
/// printed, when neither has it: the calling test then skips.
pub fn mcp_python() -> Option<String> {
    let candidates = std::env::var("PLUGHOST_TEST_MCP_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .into_iter()
        .chain(["python3".to_string()]);
    for python in candidates {
        let ok = Command::new(&python)
            .args(["-c", "import mcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(python);
        }
    }
    crate::common::missing(
        "a Python with the official `mcp` package",
        "pip install mcp, or name that Python in PLUGHOST_TEST_MCP_PYTHON",
    )
}

/// `server.py` written into `dir`.
pub fn server_file(dir: &Path) -> PathBuf {
    let path = dir.join("mcp_test_server.py");
    std::fs::write(&path, SERVER).unwrap();
    path
}

/// A free loopback port (bound and released: the server binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The server over streamable HTTP on `port`, killed when dropped.
pub struct HttpServer {
    pub child: Child,
    pub url: String,
}

impl HttpServer {
    pub fn start(python: &str, script: &Path) -> HttpServer {
        let port = free_port();
        let child = Command::new(python)
            .arg(script)
            .args(["http", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the HTTP MCP server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait (at most 20 s) until process `pid` is gone by `alive`'s account.
pub fn wait_gone(pid: u32, alive: fn(u32) -> bool) {
    let started = Instant::now();
    while alive(pid) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "process {pid} is still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
