//! The compat `flowly.agent.tools.web_providers`: the provider registry's
//! selection order (in a fresh `plughost` process each time, since the
//! registry is process-wide), and each concrete provider against a
//! loopback server answering like the real service, error paths included.
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::write_plugin;
use plughost::Host;
use serde_json::{json, Value};

// ── The loopback service ─────────────────────────────────────────

/// What the loopback service answers to the next request.
enum Reply {
    Json(u16, String),
    /// Accept, read the request, then say nothing for this long.
    Hang(Duration),
}

/// A request as the service saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct Service {
    url: String,
    replies: Arc<Mutex<Vec<Reply>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Service {
    fn start() -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let replies: Arc<Mutex<Vec<Reply>>> = Arc::default();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (r, s) = (replies.clone(), seen.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (r, s) = (r.clone(), s.clone());
                std::thread::spawn(move || answer(stream, &r, &s));
            }
        });
        Service { url, replies, seen }
    }

    /// Queue the answers to the next requests, in order.
    fn reply(&self, reply: Reply) {
        self.replies.lock().unwrap().push(reply);
    }

    fn last(&self) -> Seen {
        self.seen.lock().unwrap().last().cloned().unwrap()
    }
}

fn answer(stream: TcpStream, replies: &Mutex<Vec<Reply>>, seen: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let length = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let reply = {
        let mut queue = replies.lock().unwrap();
        (!queue.is_empty()).then(|| queue.remove(0))
    };
    seen.lock().unwrap().push(Seen {
        method,
        target,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let mut stream = stream;
    match reply {
        Some(Reply::Json(status, text)) => {
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
        Some(Reply::Hang(d)) => std::thread::sleep(d),
        None => {
            let _ = write!(stream, "HTTP/1.1 599 X\r\nContent-Length: 0\r\n\r\n");
        }
    }
}

// ── Providers through a plugin tool ──────────────────────────────

const PROBE: &str = r#"
import json
from flowly.agent.tools.web_providers.brave import BraveWebSearchProvider
from flowly.agent.tools.web_providers.searxng import SearXNGWebSearchProvider
from flowly.agent.tools.web_providers.tavily import TavilyWebSearchProvider

PROVIDERS = {"brave": BraveWebSearchProvider, "searxng": SearXNGWebSearchProvider, "tavily": TavilyWebSearchProvider}

def register(ctx):
    def probe(provider: str, op: str, arg: str, limit: int = 5):
        p = PROVIDERS[provider]()
        if op == "available":
            return json.dumps(p.is_available())
        if op == "search":
            return json.dumps(p.search(arg, limit))
        return json.dumps(p.extract(arg.split()))
    ctx.register_tool(name="probe", schema={}, handler=probe)
"#;

fn host_for(search: Value) -> (tempfile::TempDir, tempfile::TempDir, Host) {
    let home = tempfile::tempdir().unwrap();
    let config = json!({"plugins": {"enabled": ["probe"]}, "tools": {"web": {"search": search}}});
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    write_plugin(
        &home.path().join("plugins"),
        "probe",
        "name: probe\n",
        &[("__init__.py", PROBE)],
    );
    let bundled = tempfile::tempdir().unwrap();
    let host = Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path())
        .build()
        .unwrap();
    assert!(host.plugins()[0].loaded, "{:?}", host.plugins()[0].error);
    (home, bundled, host)
}

fn probe(host: &Host, provider: &str, op: &str, arg: &str, limit: i64) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(host.call_tool(
        "probe",
        json!({"provider": provider, "op": op, "arg": arg, "limit": limit}),
        "s",
    ));
    assert!(r.is_ok(), "{r:?}");
    serde_json::from_str(&r.text).unwrap()
}

fn error_of(v: &Value) -> String {
    assert_eq!(v["success"], false, "{v}");
    v["error"].as_str().unwrap().to_string()
}

/// The failure answers every provider must turn into a clear error string:
/// (reply, what the error must say).
fn failures() -> Vec<(Reply, &'static str)> {
    vec![
        (
            Reply::Json(401, r#"{"error": {"message": "invalid key"}}"#.into()),
            "rejected the credentials (HTTP 401): invalid key",
        ),
        (
            Reply::Json(429, r#"{"detail": "slow down"}"#.into()),
            "rate limit reached (HTTP 429): slow down; try again later",
        ),
        (Reply::Json(500, "oops".into()), "returned HTTP 500: oops"),
        (
            Reply::Json(200, "{not json".into()),
            "answered with malformed JSON",
        ),
        (
            Reply::Hang(Duration::from_secs(3)),
            "did not answer within 0.5 s",
        ),
    ]
}

#[test]
fn searxng_searches_an_instance_and_reports_its_failures() {
    let service = Service::start();
    let (_h, _b, host) = host_for(
        json!({"searxng": {"enabled": true, "url": format!("{}/", service.url), "timeout": 0.5}}),
    );
    assert_eq!(probe(&host, "searxng", "available", "", 0), json!(true));
    // https://docs.searxng.org/dev/search_api.html — results ranked by score.
    service.reply(Reply::Json(
        200,
        json!({"query": "rust", "number_of_results": 0, "results": [
            {"url": "https://b.example", "title": "B", "content": "second", "engine": "x", "score": 0.5},
            {"url": "https://a.example", "title": "A", "content": "first", "engine": "y", "score": 2.0},
            {"url": "https://c.example", "title": "C", "content": "third", "engine": "z", "score": 0.1}
        ], "answers": [], "suggestions": []})
        .to_string(),
    ));
    let got = probe(&host, "searxng", "search", "rust lang", 2);
    assert_eq!(
        got,
        json!({"success": true, "data": {"web": [
            {"title": "A", "url": "https://a.example", "description": "first", "position": 1},
            {"title": "B", "url": "https://b.example", "description": "second", "position": 2}
        ]}})
    );
    let seen = service.last();
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.target, "/search?q=rust+lang&format=json&pageno=1");
    for (reply, says) in failures() {
        service.reply(reply);
        let error = error_of(&probe(&host, "searxng", "search", "q", 5));
        assert!(
            error.starts_with("SearXNG ") || error.contains("SearXNG"),
            "{error}"
        );
        assert!(error.contains(says), "{error} / {says}");
    }
}

#[test]
fn searxng_is_unavailable_until_enabled_with_a_url() {
    let service = Service::start();
    let (_h, _b, host) = host_for(json!({"searxng": {"url": service.url}}));
    assert_eq!(probe(&host, "searxng", "available", "", 0), json!(false));
    let (_h, _b, host) = host_for(json!({"searxng": {"enabled": true}}));
    assert_eq!(probe(&host, "searxng", "available", "", 0), json!(false));
    assert!(error_of(&probe(&host, "searxng", "search", "q", 5)).contains("SearXNG URL is not set"));
}

#[test]
fn brave_sends_its_key_and_maps_web_results() {
    let service = Service::start();
    let (_h, _b, host) =
        host_for(json!({"apiKey": "brave-key", "brave": {"baseUrl": service.url, "timeout": 0.5}}));
    assert_eq!(probe(&host, "brave", "available", "", 0), json!(true));
    // https://api-dashboard.search.brave.com/app/documentation/web-search/responses
    service.reply(Reply::Json(
        200,
        json!({"type": "search", "query": {"original": "rust"}, "web": {"type": "search", "results": [
            {"title": "Rust", "url": "https://rust-lang.org", "description": "A language", "age": "1 day", "extra_snippets": ["fast"]},
            {"title": "Crates", "url": "https://crates.io", "description": "Packages"}
        ]}})
        .to_string(),
    ));
    let got = probe(&host, "brave", "search", "rust", 3);
    let web = &got["data"]["web"];
    assert_eq!(got["success"], true, "{got}");
    assert_eq!(web[0]["title"], "Rust");
    assert_eq!(web[0]["description"], "A language");
    assert_eq!(web[0]["position"], 1);
    assert_eq!(
        web[0]["extra_snippets"],
        json!(["fast"]),
        "Brave's enrichments kept"
    );
    assert_eq!(web[1]["position"], 2);
    let seen = service.last();
    assert_eq!(seen.method, "GET");
    assert!(
        seen.target.starts_with("/res/v1/web/search?q=rust&count=3"),
        "{}",
        seen.target
    );
    assert_eq!(seen.header("X-Subscription-Token"), Some("brave-key"));
    for (reply, says) in failures() {
        service.reply(reply);
        let error = error_of(&probe(&host, "brave", "search", "q", 5));
        assert!(
            error.contains("Brave Search") && error.contains(says),
            "{error} / {says}"
        );
    }
    service.reply(Reply::Json(401, "{}".into()));
    let error = error_of(&probe(&host, "brave", "search", "q", 5));
    assert!(
        error.contains("check the Brave API key (tools.web.search.apiKey or BRAVE_API_KEY)"),
        "{error}"
    );
}

#[test]
fn brave_without_a_key_or_when_disabled_is_unavailable() {
    let (_h, _b, host) = host_for(json!({"apiKey": "k", "enabled": false}));
    assert_eq!(probe(&host, "brave", "available", "", 0), json!(false));
    if std::env::var_os("BRAVE_API_KEY").is_none() {
        let (_h, _b, host) = host_for(json!({}));
        assert_eq!(probe(&host, "brave", "available", "", 0), json!(false));
        assert!(error_of(&probe(&host, "brave", "search", "q", 5)).contains("No Brave API key"));
    }
}

#[test]
fn tavily_searches_and_extracts_with_a_bearer_key() {
    let service = Service::start();
    let (_h, _b, host) = host_for(
        json!({"tavily": {"enabled": true, "apiKey": "tvly-key", "baseUrl": service.url, "timeout": 0.5}}),
    );
    assert_eq!(probe(&host, "tavily", "available", "", 0), json!(true));
    // https://docs.tavily.com/documentation/api-reference/endpoint/search
    service.reply(Reply::Json(
        200,
        json!({"query": "rust", "answer": null, "images": [], "results": [
            {"title": "Rust", "url": "https://rust-lang.org", "content": "A language", "score": 0.9, "raw_content": null}
        ], "response_time": 1.2})
        .to_string(),
    ));
    let got = probe(&host, "tavily", "search", "rust", 50);
    assert_eq!(
        got,
        json!({"success": true, "data": {"web": [
            {"title": "Rust", "url": "https://rust-lang.org", "description": "A language", "position": 1}
        ]}})
    );
    let seen = service.last();
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("POST", "/search")
    );
    assert_eq!(seen.header("Authorization"), Some("Bearer tvly-key"));
    let body: Value = serde_json::from_str(&seen.body).unwrap();
    assert_eq!(body["query"], "rust");
    assert_eq!(body["max_results"], 20, "capped at Tavily's maximum");

    // https://docs.tavily.com/documentation/api-reference/endpoint/extract
    service.reply(Reply::Json(
        200,
        json!({"results": [{"url": "https://a.example", "raw_content": "Page text", "images": []}],
               "failed_results": [{"url": "https://b.example", "error": "blocked"}], "response_time": 0.4})
        .to_string(),
    ));
    let got = probe(
        &host,
        "tavily",
        "extract",
        "https://a.example https://b.example",
        0,
    );
    assert_eq!(
        got,
        json!([
            {"url": "https://a.example", "title": "", "content": "Page text", "raw_content": "Page text",
             "metadata": {"sourceURL": "https://a.example", "title": ""}},
            {"url": "https://b.example", "title": "", "content": "", "error": "blocked"}
        ])
    );
    let seen = service.last();
    assert_eq!(seen.target, "/extract");
    assert_eq!(
        serde_json::from_str::<Value>(&seen.body).unwrap()["urls"],
        json!(["https://a.example", "https://b.example"])
    );

    for (reply, says) in failures() {
        service.reply(reply);
        let error = error_of(&probe(&host, "tavily", "search", "q", 5));
        assert!(
            error.starts_with("Tavily search failed: Tavily ") && error.contains(says),
            "{error} / {says}"
        );
    }
    service.reply(Reply::Json(500, "{}".into()));
    let got = probe(&host, "tavily", "extract", "https://a.example", 0);
    assert_eq!(got[0]["url"], "https://a.example");
    assert_eq!(
        got[0]["error"],
        "Tavily extract failed: Tavily returned HTTP 500"
    );
}

// ── The registry, in a fresh process each time ───────────────────

const BACKENDS: &str = r#"
from flowly.agent.tools.web_providers.base import WebSearchProvider

class Fake(WebSearchProvider):
    def __init__(self, name, available, extract=False):
        self._name, self._available, self._extract = name, available, extract
    @property
    def name(self):
        return self._name
    def is_available(self):
        if self._available == "raise":
            raise RuntimeError("broken check")
        return self._available
    def supports_extract(self):
        return self._extract
    def search(self, query, limit=5):
        return {"success": True, "data": {"web": []}}

def register(ctx):
    ctx.register_web_search_provider(Fake("alpha", True))
    ctx.register_web_search_provider(Fake("beta", False, extract=True))
    ctx.register_web_search_provider(Fake("flaky", "raise"))
"#;

const BROKEN: &str = r#"
from flowly.agent.tools.web_providers.base import WebSearchProvider

class Gamma(WebSearchProvider):
    name = "gamma"
    def is_available(self):
        return True

def register(ctx):
    ctx.register_web_search_provider(Gamma())
    raise RuntimeError("fails after registering")
"#;

const WHICH: &str = r#"
from flowly.agent.tools.web_providers import registry

def register(ctx):
    def which():
        s = registry.get_active_search_provider()
        e = registry.get_active_extract_provider()
        names = [p.name for p in registry.list_providers()]
        return f"{s.name if s else None} {e.name if e else None} {','.join(names)}"
    ctx.register_tool(name="which", schema={}, handler=which)
"#;

const PREFERRED: &str = r#"
from flowly.agent.tools.web_providers.base import WebSearchProvider

class Named(WebSearchProvider):
    def __init__(self, name):
        self._name = name
    @property
    def name(self):
        return self._name
    def is_available(self):
        return True

def register(ctx):
    for name in ("searxng", "brave", "zeta"):
        ctx.register_web_search_provider(Named(name))
"#;

fn which(home: &Path, bundled: &Path, search: Value) -> String {
    let config = json!({"plugins": {"enabled": ["web-fakes", "web-broken", "which"]},
                        "tools": {"web": {"search": search}}});
    std::fs::write(home.join("config.json"), config.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["tools", "call", "which"])
        .env("PLUGHOST_HOME", home)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env_remove("PLUGHOST_LOG")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_active_provider_follows_flowlys_selection_order() {
    let home = tempfile::tempdir().unwrap();
    let bundled = tempfile::tempdir().unwrap();
    let plugins = home.path().join("plugins");
    let backend = |names: &str| format!("kind: backend\nprovides_web_providers: [{names}]\n");
    write_plugin(
        &plugins,
        "web-fakes",
        &backend("alpha, beta, flaky"),
        &[("__init__.py", BACKENDS)],
    );
    write_plugin(
        &plugins,
        "web-broken",
        &backend("gamma"),
        &[("__init__.py", BROKEN)],
    );
    write_plugin(
        &plugins,
        "which",
        "name: which\n",
        &[("__init__.py", WHICH)],
    );
    let (h, b) = (home.path(), bundled.path());

    // The one available provider; beta is the only extractor but unavailable;
    // the failed plugin's gamma never joined; a raising check counts as unavailable.
    assert_eq!(which(h, b, json!({})), "alpha None alpha,beta,flaky");
    // Configured: used even when unavailable (the tool then says what is missing).
    assert_eq!(
        which(h, b, json!({"backend": "beta"})),
        "beta beta alpha,beta,flaky"
    );
    // Per capability wins over the shared key.
    assert_eq!(
        which(h, b, json!({"backend": "beta", "searchBackend": "alpha"})),
        "alpha beta alpha,beta,flaky"
    );
    // Not registered: the usual choice.
    assert_eq!(
        which(h, b, json!({"backend": "nosuch"})),
        "alpha None alpha,beta,flaky"
    );

    // Several available: Flowly's preference order (brave before searxng).
    write_plugin(
        &plugins,
        "web-fakes",
        &backend("searxng, brave, zeta"),
        &[("__init__.py", PREFERRED)],
    );
    assert_eq!(which(h, b, json!({})), "brave None brave,searxng,zeta");
    // A provider marked default: true.
    assert_eq!(
        which(h, b, json!({"searxng": {"default": true}})),
        "searxng None brave,searxng,zeta"
    );
}
