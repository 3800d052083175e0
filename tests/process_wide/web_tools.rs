//! The built-in `web_search` and `web_extract` tools and the bundled
//! `web-*` backend plugins: dispatch to the active provider (sync and
//! async methods), Flowly's result formatting, the URL rule, availability,
//! and `plugins doctor`'s per-capability view. Each case runs `plughost`
//! in a fresh process (the provider registry is process-wide); services
//! are loopback servers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use crate::common::write_plugin;
use serde_json::{json, Value};

/// The queued answers: (status, content type, body).
type Replies = Arc<Mutex<Vec<(u16, &'static str, String)>>>;

/// A loopback service answering each request with the next queued
/// (status, content type, body), recording the request targets.
struct Service {
    url: String,
    replies: Replies,
    targets: Arc<Mutex<Vec<String>>>,
}

impl Service {
    fn start() -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let replies: Replies = Arc::default();
        let targets: Arc<Mutex<Vec<String>>> = Arc::default();
        let (r, t) = (replies.clone(), targets.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut length = 0;
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap();
                    let h = h.trim_end().to_ascii_lowercase();
                    if h.is_empty() {
                        break;
                    }
                    if let Some(v) = h.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                t.lock()
                    .unwrap()
                    .push(line.split_whitespace().nth(1).unwrap_or("").to_string());
                let (status, kind, text) = {
                    let mut queue = r.lock().unwrap();
                    if queue.is_empty() {
                        (599, "text/plain", String::new())
                    } else {
                        queue.remove(0)
                    }
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        Service {
            url,
            replies,
            targets,
        }
    }

    fn reply(&self, status: u16, kind: &'static str, body: impl Into<String>) {
        self.replies
            .lock()
            .unwrap()
            .push((status, kind, body.into()));
    }

    fn targets(&self) -> Vec<String> {
        self.targets.lock().unwrap().clone()
    }
}

/// The repository's bundled `web-*` plugins, copied to a temporary
/// directory (loading them must not write into the working tree).
fn web_backends() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins_bundled");
    for entry in std::fs::read_dir(&source).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("web-") {
            continue;
        }
        let target = dir.path().join(&name);
        std::fs::create_dir(&target).unwrap();
        for file in ["plugin.yaml", "__init__.py"] {
            std::fs::copy(entry.path().join(file), target.join(file)).unwrap();
        }
    }
    dir
}

/// Settings from the environment a provider would fall back on: removed so
/// that only `config.json` speaks.
const PROVIDER_ENV: [&str; 13] = [
    "BRAVE_API_KEY",
    "TAVILY_API_KEY",
    "EXA_API_KEY",
    "FIRECRAWL_API_KEY",
    "FIRECRAWL_API_URL",
    "PARALLEL_API_KEY",
    "SEARXNG_URL",
    "BRAVE_BASE_URL",
    "TAVILY_BASE_URL",
    "EXA_BASE_URL",
    "FIRECRAWL_BASE_URL",
    "PARALLEL_BASE_URL",
    "SEARXNG_BASE_URL",
];

fn plughost(home: &Path, bundled: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.args(args)
        .env("PLUGHOST_HOME", home)
        .env("PLUGHOST_BUNDLED_DIR", bundled)
        .env_remove("PLUGHOST_LOG");
    for var in PROVIDER_ENV {
        cmd.env_remove(var);
    }
    cmd.output().unwrap()
}

fn configure(home: &Path, config: Value) {
    std::fs::write(home.join("config.json"), config.to_string()).unwrap();
}

fn call(home: &Path, bundled: &Path, tool: &str, args: Value) -> (bool, String) {
    let out = plughost(
        home,
        bundled,
        &["tools", "call", tool, "--args", &args.to_string()],
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim_end().to_string(),
    )
}

const SEARXNG_ANSWER: &str = r#"{"query": "rust", "results": [
  {"url": "https://a.example", "title": "A", "content": "first", "score": 2.0},
  {"url": "https://b.example", "title": "B", "content": "second", "score": 1.0}]}"#;

#[test]
fn web_search_dispatches_to_the_configured_backend_and_formats_flowlys_way() {
    crate::alone!(web_search_dispatches_to_the_configured_backend_and_formats_flowlys_way);
    let service = Service::start();
    let home = tempfile::tempdir().unwrap();
    let bundled = web_backends();
    let (h, b) = (home.path(), bundled.path());
    configure(
        h,
        json!({"tools": {"web": {"search": {"searxng": {"enabled": true, "url": service.url}}}}}),
    );
    service.reply(200, "application/json", SEARXNG_ANSWER);
    let (ok, text) = call(h, b, "web_search", json!({"query": "rust", "count": 1}));
    assert!(ok, "{text}");
    assert_eq!(
        text,
        "Results for: rust\n\n1. A\n   https://a.example\n   first"
    );
    assert_eq!(
        service.targets(),
        ["/search?q=rust&format=json&pageno=1"],
        "SearXNG's own count"
    );
    // The service fails: its error string is the result.
    service.reply(500, "application/json", "{}");
    let (ok, text) = call(h, b, "web_search", json!({"query": "rust"}));
    assert!(ok, "a provider's error is a result, not a failed call");
    assert_eq!(text, "SearXNG returned HTTP 500");
    // Bad arguments are refused before any provider is asked.
    let (ok, text) = call(h, b, "web_search", json!({"count": 3}));
    assert!(!ok);
    assert!(text.contains("invalid arguments for web_search"), "{text}");

    // Listed as built-in tools.
    let out = plughost(h, b, &["tools", "list", "--json"]);
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap();
    for name in ["web_search", "web_extract"] {
        let t = tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed"));
        assert_eq!(t["plugin"], "builtin");
    }
}

#[test]
fn without_an_available_provider_web_search_is_unavailable_and_says_why() {
    crate::alone!(without_an_available_provider_web_search_is_unavailable_and_says_why);
    let home = tempfile::tempdir().unwrap();
    let bundled = web_backends();
    let (h, b) = (home.path(), bundled.path());
    configure(h, json!({}));
    let (ok, text) = call(h, b, "web_search", json!({"query": "rust"}));
    assert!(!ok);
    assert!(
        text.starts_with("Error: web_search is unavailable: no web search provider is available ("),
        "{text}"
    );
    for says in [
        "brave: no API key (tools.web.search.apiKey or BRAVE_API_KEY)",
        "searxng: not enabled (set tools.web.search.searxng.enabled to true)",
        "exa: not enabled",
        "configure one under tools.web.search in config.json",
    ] {
        assert!(text.contains(says), "{says}: {text}");
    }
    // A configured backend that lacks its key: named, with what it lacks.
    configure(
        h,
        json!({"tools": {"web": {"search": {"backend": "tavily", "tavily": {"enabled": true}}}}}),
    );
    let (ok, text) = call(h, b, "web_search", json!({"query": "rust"}));
    assert!(!ok);
    assert_eq!(
        text,
        "Error: web_search is unavailable: the configured web search backend 'tavily' is not available: no API key (tools.web.search.tavily.apiKey or TAVILY_API_KEY)"
    );
    // No backend plugin at all.
    let empty = tempfile::tempdir().unwrap();
    let (ok, text) = call(h, empty.path(), "web_search", json!({"query": "rust"}));
    assert!(!ok);
    assert!(
        text.starts_with("Error: web_search is unavailable: no web backend plugin is loaded")
            || text.contains("no web search provider is registered"),
        "{text}"
    );
}

const PAGE: &str = "<html><head><title>Local</title></head><body><main><p>Served on loopback.</p></main></body></html>";

#[test]
fn web_extract_refuses_private_addresses_unless_allowed_then_uses_the_local_backend() {
    crate::alone!(web_extract_refuses_private_addresses_unless_allowed_then_uses_the_local_backend);
    let service = Service::start();
    let home = tempfile::tempdir().unwrap();
    let bundled = web_backends();
    let (h, b) = (home.path(), bundled.path());
    let page = format!("{}/doc", service.url);

    // Flowly's rule: every URL refused, nothing fetched.
    configure(h, json!({}));
    let (ok, text) = call(
        h,
        b,
        "web_extract",
        json!({"urls": [page, "http://169.254.169.254/latest/meta-data"]}),
    );
    assert!(ok, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"success": false, "results": [
            {"url": page, "title": "", "content": "", "error": "IP 127.0.0.1 is in blocked private range 127.0.0.0/8"},
            {"url": "http://169.254.169.254/latest/meta-data", "title": "", "content": "",
             "error": "IP 169.254.169.254 is in blocked private range 169.254.0.0/16"}
        ]})
    );
    assert!(service.targets().is_empty());
    let (_, text) = call(h, b, "web_extract", json!({"urls": []}));
    assert_eq!(
        text,
        r#"{"success": false, "error": "Provide a non-empty list of URLs."}"#
    );

    // tools.web.allowPrivateUrls: the keyless local backend (async) fetches it.
    configure(h, json!({"tools": {"web": {"allowPrivateUrls": true}}}));
    service.reply(200, "text/html", PAGE);
    let (ok, text) = call(
        h,
        b,
        "web_extract",
        json!({"urls": [page], "maxChars": 100}),
    );
    assert!(ok, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"success": true, "backend": "local", "results": [
            {"url": page, "title": "Local", "content": "# Local\n\nServed on loopback."}
        ]})
    );
    assert_eq!(service.targets(), ["/doc"]);
}

#[test]
fn web_extract_uses_the_configured_extract_backend_awaiting_its_async_method() {
    crate::alone!(web_extract_uses_the_configured_extract_backend_awaiting_its_async_method);
    let service = Service::start();
    let home = tempfile::tempdir().unwrap();
    let bundled = web_backends();
    let (h, b) = (home.path(), bundled.path());
    configure(
        h,
        json!({"tools": {"web": {"search": {"extractBackend": "parallel",
            "parallel": {"enabled": true, "apiKey": "k", "baseUrl": service.url}}}}}),
    );
    service.reply(
        200,
        "application/json",
        json!({"extract_id": "e", "results": [{"url": "https://a.example", "title": "A",
                "full_content": "0123456789".repeat(12), "excerpts": []}], "errors": []})
        .to_string(),
    );
    let (ok, text) = call(
        h,
        b,
        "web_extract",
        json!({"urls": ["https://a.example"], "maxChars": 100}),
    );
    assert!(ok, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"success": true, "backend": "parallel", "results": [
            {"url": "https://a.example", "title": "A", "content": "0123456789".repeat(10), "truncated": true}
        ]})
    );
    assert_eq!(service.targets(), ["/v1beta/extract"]);
}

const MINE: &str = r#"
import asyncio
from flowly.agent.tools.web_providers.base import WebSearchProvider

class Mine(WebSearchProvider):
    @property
    def name(self):
        return "mine"
    def is_available(self):
        return True
    async def search(self, query, limit=5):
        await asyncio.sleep(0)
        if query == "fail":
            return {"success": False, "error": "mine is down"}
        if query == "raise":
            raise RuntimeError("mine exploded")
        return {"success": True, "data": {"summary": "S", "web": [
            {"title": "T", "url": "https://t.example", "description": "D", "position": 1,
             "extra_snippets": ["x"], "age": "2 days", "language": "en", "meta_url": {"hostname": "t.example"}}],
            "news": [{"title": "N", "url": "https://n.example", "source": "wire", "age": "1h"}]}}

def register(ctx):
    ctx.register_web_search_provider(Mine())
"#;

#[test]
fn a_user_backend_with_an_async_search_serves_web_search() {
    crate::alone!(a_user_backend_with_an_async_search_serves_web_search);
    let home = tempfile::tempdir().unwrap();
    let bundled = web_backends();
    let (h, b) = (home.path(), bundled.path());
    write_plugin(
        &h.join("plugins"),
        "web-mine",
        "name: web-mine\nkind: backend\nprovides_web_providers: [mine]\n",
        &[("__init__.py", MINE)],
    );
    configure(h, json!({"plugins": {"enabled": ["web-mine"]}}));
    let (ok, text) = call(h, b, "web_search", json!({"query": "q"}));
    assert!(ok, "{text}");
    assert_eq!(
        text,
        "Results for: q\n\nSummary: S\n\n1. T\n   https://t.example\n   D\n   > x\n   [2 days · lang: en · t.example]\n\nRecent News:\n- N (wire, 1h)\n  https://n.example"
    );
    let (ok, text) = call(h, b, "web_search", json!({"query": "fail"}));
    assert!(ok);
    assert_eq!(text, "mine is down");
    let (ok, text) = call(h, b, "web_search", json!({"query": "raise"}));
    assert!(ok);
    assert_eq!(text, "Error: mine exploded");
}

#[test]
fn the_eight_bundled_backends_load_and_are_listed() {
    crate::alone!(the_eight_bundled_backends_load_and_are_listed);
    let home = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["plugins", "list", "--json"])
        .env("PLUGHOST_HOME", home.path())
        .env("XDG_CACHE_HOME", cache.path())
        .env_remove("PLUGHOST_BUNDLED_DIR")
        .env_remove("PLUGHOST_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    for name in [
        "brave",
        "ddgs",
        "exa",
        "firecrawl",
        "local",
        "parallel",
        "searxng",
        "tavily",
    ] {
        let key = format!("web-{name}");
        let p = list
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["key"] == key.as_str())
            .unwrap_or_else(|| panic!("{key} listed"));
        assert_eq!(p["source"], "bundled", "{p}");
        assert_eq!(p["status"], "loaded", "{p}");
        assert_eq!(p["kind"], "backend");
        assert_eq!(p["provides_web_providers"], json!([name]));
    }
    // The table names each backend's provider.
    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["plugins", "list"])
        .env("PLUGHOST_HOME", home.path())
        .env("XDG_CACHE_HOME", cache.path())
        .env_remove("PLUGHOST_BUNDLED_DIR")
        .env_remove("PLUGHOST_LOG")
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("web-searxng "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        row.contains("web: searxng") && row.contains("loaded"),
        "{row}"
    );
}

#[test]
fn doctor_shows_each_capabilitys_providers_and_the_active_one() {
    crate::alone!(doctor_shows_each_capabilitys_providers_and_the_active_one);
    let service = Service::start();
    let home = tempfile::tempdir().unwrap();
    let bundled = web_backends();
    let (h, b) = (home.path(), bundled.path());
    configure(
        h,
        json!({"plugins": {"disabled": ["web-tavily"]},
               "tools": {"web": {"search": {"searxng": {"enabled": true, "url": service.url}}}}}),
    );
    let out = plughost(h, b, &["plugins", "doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "web providers:",
        "  search — active: searxng",
        "    searxng (SearXNG) [web-searxng]: available",
        "    brave (Brave Search) [web-brave]: unavailable — no API key (tools.web.search.apiKey or BRAVE_API_KEY)",
        "    exa (Exa) [web-exa]: unavailable — not enabled (set tools.web.search.exa.enabled to true)",
        "  extract — active: local",
        "    local (Local readability) [web-local]: available",
        "  tavily [web-tavily]: not registered — its plugin is disabled",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
    }
    assert!(
        text.contains("    ddgs (DuckDuckGo (ddgs)) [web-ddgs]: unavailable — not enabled"),
        "{text}"
    );
    // The same view in --json.
    let out = plughost(h, b, &["plugins", "doctor", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["web"]["search"]["active"], "searxng");
    assert_eq!(report["web"]["extract"]["active"], "local");
    let brave = report["web"]["search"]["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "brave")
        .unwrap();
    assert_eq!(brave["available"], false);
    assert_eq!(brave["plugin"], "web-brave");
    assert_eq!(
        report["web"]["not_registered"],
        json!([{"name": "tavily", "plugin": "web-tavily", "reason": "its plugin is disabled"}])
    );
    // Nothing available for search: said so.
    configure(h, json!({}));
    let out = plughost(h, b, &["plugins", "doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("  search — none available: web_search is not offered"),
        "{text}"
    );
}

#[test]
fn the_web_tools_are_offered_only_while_a_provider_is_available() {
    crate::alone!(the_web_tools_are_offered_only_while_a_provider_is_available);
    let home = tempfile::tempdir().unwrap();
    let bundled = web_backends();
    configure(home.path(), json!({}));
    let mut builder = plughost::Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path());
    for tool in plughost::agent::tools::web_tools(home.path()) {
        builder = builder.tool(tool);
    }
    let host = builder.build().unwrap();
    let registry = host.registry();
    let search = registry.tool("web_search").unwrap();
    let extract = registry.tool("web_extract").unwrap();
    if PROVIDER_ENV.iter().all(|v| std::env::var_os(v).is_none()) {
        // What the agent asks before offering a tool to the model.
        assert!(matches!(search.handler.check(), Some(Ok(false))));
        let r = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(host.call_tool("web_search", json!({"query": "q"}), "s"));
        match &r.outcome {
            plughost::ToolOutcome::Unavailable {
                reason: plughost::Unavailability::Unmet { problem },
            } => assert!(
                problem.starts_with("no web search provider is available ("),
                "{problem}"
            ),
            other => panic!("{other:?}"),
        }
        let details = serde_json::to_value(r.outcome.details()).unwrap();
        assert_eq!(details["reason"], "unmet");
    }
    // The keyless local backend always serves extraction.
    assert!(matches!(extract.handler.check(), Some(Ok(true))));
}

/// The availability of `web_search` is cached and `config.json` watched
/// (issue 26: configuration read once and watched): a backend configured
/// while the host runs is offered once the change is seen, and removing it
/// again withdraws the tool, without a restart. The loop waits for the
/// watch's event, not for a time.
#[test]
fn a_changed_config_json_is_seen_without_a_restart() {
    crate::alone!(a_changed_config_json_is_seen_without_a_restart);
    if PROVIDER_ENV.iter().any(|v| std::env::var_os(v).is_some()) {
        return; // a provider from the environment: always available
    }
    let home = tempfile::tempdir().unwrap();
    let bundled = web_backends();
    configure(home.path(), json!({}));
    let mut builder = plughost::Host::builder()
        .home(home.path())
        .bundled_dir(bundled.path());
    for tool in plughost::agent::tools::web_tools(home.path()) {
        builder = builder.tool(tool);
    }
    let host = builder.build().unwrap();
    let registry = host.registry();
    let search = registry.tool("web_search").unwrap();
    assert!(matches!(search.handler.check(), Some(Ok(false))));
    // Cached: asking again gives the same answer.
    assert!(matches!(search.handler.check(), Some(Ok(false))));
    let until = |want: bool| {
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !matches!(search.handler.check(), Some(Ok(ok)) if ok == want) {
            assert!(
                std::time::Instant::now() < give_up,
                "web_search's availability never became {want}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    };
    configure(
        home.path(),
        json!({"tools": {"web": {"search": {"searxng": {"enabled": true, "url": "http://127.0.0.1:9"}}}}}),
    );
    until(true);
    configure(home.path(), json!({}));
    until(false);
}
