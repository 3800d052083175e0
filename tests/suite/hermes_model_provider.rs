//! Hermes model-provider plugins (issue 52 item 1): a `kind:
//! model-provider` plugin in the shape of Hermes's
//! `plugins/model-providers/<name>/` (its `__init__.py` calls
//! `register_provider(ProviderProfile(...))` when imported, no
//! `register(ctx)`) pointed at an OpenAI-compatible stub on loopback,
//! through `run`, `serve` and `plugins doctor`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{self, home_with, no_bundled, run_bounded, write_plugin};
use serde_json::{json, Value};

/// One request the stub received: its headers (lower-cased names) and body.
#[derive(Clone, Debug)]
pub struct Seen {
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An OpenAI-compatible stub on loopback answering every request with a
/// streamed `reply`, recording each request.
pub struct Stub {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

pub fn stub(reply: &'static str) -> Stub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let log = log.clone();
            std::thread::spawn(move || {
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut headers = Vec::new();
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = line.split_once(':') {
                        let k = k.trim().to_ascii_lowercase();
                        if k == "content-length" {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        headers.push((k, v.trim().to_string()));
                    }
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                log.lock().unwrap().push(Seen { headers, body });
                let chunk = json!({"choices": [{"index": 0, "delta": {"content": reply}, "finish_reason": null}]});
                let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
                let sse = format!("data: {chunk}\n\ndata: {end}\n\ndata: [DONE]\n\n");
                let _ = stream.write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{sse}", sse.len())
                        .as_bytes(),
                );
                let _ = stream.flush();
            });
        }
    });
    Stub { url, seen }
}

/// The provider plugin `stubcloud` pointed at `url`, as Hermes's bundled
/// provider plugins are written.
pub fn write_provider(plugins: &Path, url: &str) {
    let code = format!(
        r#""""StubCloud provider profile."""

from providers import register_provider
from providers.base import ProviderProfile

stubcloud = ProviderProfile(
    name="stubcloud",
    aliases=("stub-cloud",),
    display_name="StubCloud",
    description="StubCloud (OpenAI-compatible)",
    env_vars=("STUBCLOUD_API_KEY", "STUBCLOUD_TOKEN"),
    base_url="{url}",
    default_headers={{"X-Title": "plughost-test", "HTTP-Referer": "https://example.invalid"}},
    fallback_models=("stub-large", "stub-small"),
)

register_provider(stubcloud)
"#
    );
    write_plugin(
        plugins,
        "stubcloud",
        "name: stubcloud\nkind: model-provider\nversion: 1.0.0\ndescription: \"StubCloud (OpenAI-compatible)\"\n",
        &[("__init__.py", &code)],
    );
}

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
    hermes: tempfile::TempDir,
}

impl Env {
    fn new(url: &str) -> Env {
        Env::with_home(url, home_with(&["stubcloud"]))
    }

    /// `serve` isolates third-party plugins in workers, where the profile
    /// they register stays: a provider plugin is trusted to serve its models.
    fn trusted(url: &str) -> Env {
        Env::with_home(url, common::trusted_home(&["stubcloud"]))
    }

    fn with_home(url: &str, home: tempfile::TempDir) -> Env {
        let env = Env {
            home,
            bundled: no_bundled(),
            hermes: tempfile::tempdir().unwrap(),
        };
        write_provider(&env.home.path().join("plugins"), url);
        env
    }

    fn command(&self, args: &[&str], key: Option<&str>) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes.path())
            .env_remove("STUBCLOUD_TOKEN")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("PLUGHOST_LOG");
        match key {
            Some(k) => cmd.env("STUBCLOUD_API_KEY", k),
            None => cmd.env_remove("STUBCLOUD_API_KEY"),
        };
        cmd
    }

    fn run(&self, args: &[&str], key: Option<&str>) -> std::process::Output {
        run_bounded(self.command(args, key), Duration::from_secs(90))
    }
}

#[test]
fn run_calls_the_plugins_provider_with_its_base_url_headers_and_key() {
    let s = stub("hello from stubcloud");
    let env = Env::new(&s.url);
    let out = env.run(
        &["run", "--json", "--model", "stubcloud:stub-large", "hi"],
        Some("sk-stub"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["reply"], "hello from stubcloud", "{report:#}");
    let seen = s.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].body["model"], "stub-large");
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-stub"));
    assert_eq!(seen[0].header("x-title"), Some("plughost-test"));
    assert_eq!(
        seen[0].header("http-referer"),
        Some("https://example.invalid")
    );
    // By its alias, with no model named: the first it lists.
    let out = env.run(
        &["run", "--json", "--model", "stub-cloud", "hi"],
        Some("sk-stub"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(s.seen.lock().unwrap()[1].body["model"], "stub-large");
}

#[test]
fn a_provider_without_its_key_is_refused_naming_the_variables() {
    let s = stub("unused");
    let env = Env::new(&s.url);
    let out = env.run(&["run", "--model", "stubcloud:stub-large", "hi"], None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("model provider 'stubcloud' (plugin 'stubcloud') needs its key: set STUBCLOUD_API_KEY or STUBCLOUD_TOKEN"),
        "{stderr}"
    );
    assert!(s.seen.lock().unwrap().is_empty());
    // An unknown provider names the plugins' providers.
    let out = env.run(&["run", "--model", "nosuch:m", "hi"], Some("k"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown model provider 'nosuch'"),
        "{stderr}"
    );
    assert!(stderr.contains("stubcloud:MODEL"), "{stderr}");
}

#[test]
fn doctor_lists_the_provider_and_whether_its_key_is_set() {
    let s = stub("unused");
    let env = Env::new(&s.url);
    let out = env.run(&["plugins", "doctor"], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "model provider stubcloud at {}: key NOT set (set STUBCLOUD_API_KEY or STUBCLOUD_TOKEN); use it with --model stubcloud:MODEL",
            s.url
        )),
        "{text}"
    );
    let out = env.run(&["plugins", "doctor"], Some("sk"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("key set (STUBCLOUD_API_KEY)"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_through_the_plugins_provider() {
    let s = stub("served by stubcloud");
    let env = Env::trusted(&s.url);
    let child = env
        .command(
            &["serve", "--port", "0", "--model", "stubcloud:stub-small"],
            Some("sk-serve"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, body) = common::chat_once(child, "hi").await;
    assert_eq!(status, 200, "{body:#}");
    assert_eq!(
        body["choices"][0]["message"]["content"], "served by stubcloud",
        "{body:#}"
    );
    let seen = s.seen.lock().unwrap().clone();
    assert_eq!(seen.last().unwrap().body["model"], "stub-small");
    assert_eq!(
        seen.last().unwrap().header("authorization"),
        Some("Bearer sk-serve")
    );
}
