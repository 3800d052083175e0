//! What the replica tests and bench start: a throw-away PostgreSQL
//! (`deploy/pg-start.sh`, initdb into a temporary directory on a free
//! port), `plughost serve` replicas on loopback ports with `--sessions`, and
//! HAProxy in front with round-robin and no stickiness. Each is `None`
//! (with the reason printed) when its program is not installed here;
//! `.ci/run` installs them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A PostgreSQL cluster of its own, stopped when dropped.
pub struct Pg {
    dir: tempfile::TempDir,
    pub url: String,
    port: String,
}

/// A stopped cluster `deploy/pg-start.sh` made once for this test
/// binary (initdb, the role and the database), copied by each test's
/// [`Pg::start`]: initdb is most of a start, and a copy is a tenth of it.
/// Removed when the binary exits. `Err`: why there is none.
fn template() -> Result<&'static Path, String> {
    static TEMPLATE: std::sync::OnceLock<Result<tempfile::TempDir, String>> =
        std::sync::OnceLock::new();
    extern "C" fn remove_template() {
        if let Some(Ok(dir)) = TEMPLATE.get() {
            let _ = Command::new("bash")
                .arg(repo().join("deploy/pg-start.sh"))
                .arg("--stop")
                .arg(dir.path())
                .output();
            let _ = std::fs::remove_dir_all(dir.path());
        }
    }
    let made = TEMPLATE.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("plughost-pg-template")
            .tempdir()
            .unwrap();
        let out = Command::new("bash")
            .arg(repo().join("deploy/pg-start.sh"))
            .arg(dir.path())
            .arg(free_port().to_string())
            .output()
            .unwrap();
        if out.status.code() == Some(3) {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        assert!(
            out.status.success(),
            "pg-start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stop = Command::new("bash")
            .arg(repo().join("deploy/pg-start.sh"))
            .arg("--stop")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(stop.status.success());
        // SAFETY: atexit only records the pointer of a function that takes
        // no arguments and unwinds nowhere (it ignores every error); it
        // runs once, at exit, after the static is set.
        unsafe { libc::atexit(remove_template) };
        Ok(dir)
    });
    made.as_ref().map(|d| d.path()).map_err(Clone::clone)
}

impl Pg {
    /// A server of its own: a copy of the [`template`] started on a free port.
    pub fn start() -> Option<Pg> {
        let template = match template() {
            Ok(t) => t.join("data"),
            Err(why) => {
                crate::common::missing(&format!("PostgreSQL ({why})"), "apt-get install postgresql")
            }
        };
        let dir = tempfile::Builder::new()
            .prefix("plughost-pg")
            .tempdir()
            .unwrap();
        // The server's user (postgres, when the tests run as root) writes
        // its socket and log there.
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let owner = std::fs::metadata(&template).unwrap().uid();
        std::os::unix::fs::chown(dir.path(), Some(owner), None).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let copied = Command::new("cp")
            .arg("-a")
            .arg(&template)
            .arg(dir.path().join("data"))
            .status()
            .unwrap();
        assert!(copied.success(), "cannot copy the template cluster");
        let port = free_port().to_string();
        let pg = Pg {
            url: format!("postgres://plughost@127.0.0.1:{port}/plughost"),
            dir,
            port,
        };
        pg.start_again();
        Some(pg)
    }

    /// Its URL through the Unix socket rather than loopback TCP (how a
    /// replica on the server's own machine reaches it most cheaply).
    pub fn socket_url(&self) -> String {
        let dir = self.dir.path().to_string_lossy().replace('/', "%2F");
        format!("postgres://plughost@{dir}:{}/plughost", self.port)
    }

    /// Stop the server (its data stays), as a restart or an outage does.
    pub fn stop(&self) {
        let out = Command::new("bash")
            .arg(repo().join("deploy/pg-start.sh"))
            .arg("--stop")
            .arg(self.dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Start it again on the same port, with its data.
    pub fn start_again(&self) {
        let out = Command::new("bash")
            .arg(repo().join("deploy/pg-start.sh"))
            .arg("--start")
            .arg(self.dir.path())
            .arg(&self.port)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The server's log (`log_statement` lines among it).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }

    /// A connection for the test's own queries.
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo().join("deploy/pg-start.sh"))
            .arg("--stop")
            .arg(self.dir.path())
            .output();
    }
}

/// One `plughost serve` replica; killed (SIGKILL) when dropped.
pub struct Replica {
    pub child: Child,
    pub url: String,
    pub port: u16,
    pub stderr: std::sync::mpsc::Receiver<String>,
    /// What it printed before its address.
    pub early: Vec<String>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start a replica on `home` (its plugins; shared `test_home` for what
/// they write), sessions in `pg_url`, the scripted model replaying `script`.
pub fn replica(
    home: &Path,
    test_home: &Path,
    bundled: &Path,
    script: &Path,
    pg_url: &str,
    extra: &[&str],
) -> Replica {
    serve(home, test_home, bundled, script, Some(pg_url), extra)
}

/// [`replica`], with the sessions in `pg_url` or (`None`) in `home`'s files.
pub fn serve(
    home: &Path,
    test_home: &Path,
    bundled: &Path,
    script: &Path,
    pg_url: Option<&str>,
    extra: &[&str],
) -> Replica {
    let sessions: Vec<&str> = pg_url.map(|u| vec!["--sessions", u]).unwrap_or_default();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home)
        .args(["serve", "--port", "0", "--model", "scripted", "--script"])
        .arg(script)
        .args(&sessions)
        .args(extra)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env("PLUGHOST_HOME_FOR_TEST", test_home)
        .env_remove("PLUGHOST_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("PLUGHOST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (url, rx, seen) = crate::common::serve_lines(&mut child);
    let port = url.rsplit(':').next().unwrap().parse().unwrap();
    Replica {
        child,
        url,
        port,
        stderr: rx,
        early: seen,
    }
}

/// HAProxy in front of `ports` ([`haproxy`]: round-robin, no stickiness),
/// `/healthz` checks every 200 ms (a dead replica leaves the rotation
/// after one).
pub struct Lb {
    child: Child,
    _dir: tempfile::TempDir,
    pub url: String,
}

impl Drop for Lb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn haproxy_binary() -> Option<PathBuf> {
    [
        "/usr/sbin/haproxy",
        "/usr/local/sbin/haproxy",
        "/usr/bin/haproxy",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

pub fn haproxy(ports: &[u16]) -> Option<Lb> {
    haproxy_balancing(ports, "balance roundrobin")
}

/// [`haproxy`] routing each session to one replica by its
/// `X-Plughost-Session` header, as `deploy/cluster.sh` does.
pub fn haproxy_by_session(ports: &[u16]) -> Option<Lb> {
    haproxy_balancing(
        ports,
        "balance hdr(x-plughost-session)\n    hash-type consistent",
    )
}

fn haproxy_balancing(ports: &[u16], balance: &str) -> Option<Lb> {
    let Some(bin) = haproxy_binary() else {
        crate::common::missing("HAProxy", "apt-get install haproxy");
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let template = std::fs::read_to_string(repo().join("deploy/haproxy.cfg.in")).unwrap();
    let servers: String = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("    server r{i} 127.0.0.1:{p} check\n"))
        .collect();
    let cfg = template
        .replace("@LISTEN@", &format!("127.0.0.1:{port}"))
        .replace("@BALANCE@", balance)
        .replace("@SERVERS@\n", &servers);
    let path = dir.path().join("haproxy.cfg");
    std::fs::write(&path, cfg).unwrap();
    let child = Command::new(bin)
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "haproxy did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Until its checks have found every replica up (it starts them down).
    let health = "GET /healthz HTTP/1.0\r\nhost: x\r\n\r\n";
    let mut up = 0;
    while up < ports.len() * 2 {
        assert!(Instant::now() < deadline, "haproxy found no replica up");
        use std::io::{Read, Write};
        let mut answer = String::new();
        let ok = std::net::TcpStream::connect(("127.0.0.1", port))
            .and_then(|mut s| {
                s.write_all(health.as_bytes())?;
                s.read_to_string(&mut answer)
            })
            .is_ok()
            && (answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"));
        up = if ok { up + 1 } else { 0 };
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(Lb {
        child,
        _dir: dir,
        url,
    })
}

/// A script replying `re: <the user's message>` to each of `turns` turns.
pub fn echo_script(dir: &Path, turns: usize) -> PathBuf {
    let mut text = String::from("turns:\n");
    for _ in 0..turns {
        text.push_str("  - say: \"re: {user_message}\"\n");
    }
    let path = dir.join("script.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// One chat request for `session`'s turn `text` (answered within 30 s).
pub async fn post_chat(url: &str, session: &str, text: &str) -> reqwest::Response {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap()
        .post(format!("{url}/v1/chat/completions"))
        .header("x-plughost-session", session)
        .json(&serde_json::json!({"messages": [{"role": "user", "content": text}]}))
        .send()
        .await
        .unwrap()
}

/// The directories [`two_replicas`] use, kept while they run.
pub type TwoReplicaDirs = ([tempfile::TempDir; 2], tempfile::TempDir, tempfile::TempDir);

/// Two replicas on `pg`, each with a home of its own, the scripted model
/// answering `re: <message> after <how many messages it was sent>`.
pub fn two_replicas(pg: &Pg, extra: &[&str]) -> (Replica, Replica, TwoReplicaDirs) {
    let shared = tempfile::tempdir().unwrap();
    let bundled = crate::common::no_bundled();
    let mut text = String::from("turns:\n");
    for _ in 0..40 {
        text.push_str("  - say: \"re: {user_message} after {message_count}\"\n");
    }
    let script = shared.path().join("counting.yaml");
    std::fs::write(&script, text).unwrap();
    let homes = [crate::common::home_with(&[]), crate::common::home_with(&[])];
    let [a, b] = [0, 1].map(|i| {
        replica(
            homes[i].path(),
            shared.path(),
            bundled.path(),
            &script,
            &pg.url,
            extra,
        )
    });
    (a, b, (homes, shared, bundled))
}
