//! The compat `flowly.agent.tools.web_providers`: the provider registry's
//! selection order (in a fresh `plughost` process each time, since the
//! registry is process-wide), and each concrete provider against a
//! loopback server answering like the real service, error paths included.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::write_plugin;
use plughost::Host;
use serde_json::{json, Value};

// ── The loopback service ─────────────────────────────────────────

/// What the loopback service answers to the next request.
enum Reply {
    Json(u16, String),
    /// A status, a content type and a body.
    Page(u16, &'static str, String),
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
        Some(Reply::Page(status, kind, text)) => {
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
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
import importlib, inspect, json, sys
from flowly.agent.tools.web_providers.brave import BraveWebSearchProvider
from flowly.agent.tools.web_providers.ddgs import DDGSWebSearchProvider
from flowly.agent.tools.web_providers.exa import ExaWebSearchProvider
from flowly.agent.tools.web_providers.firecrawl import FirecrawlWebSearchProvider
from flowly.agent.tools.web_providers.local import LocalExtractProvider
from flowly.agent.tools.web_providers.parallel import ParallelWebSearchProvider
from flowly.agent.tools.web_providers.searxng import SearXNGWebSearchProvider
from flowly.agent.tools.web_providers.tavily import TavilyWebSearchProvider

PROVIDERS = {"brave": BraveWebSearchProvider, "searxng": SearXNGWebSearchProvider, "tavily": TavilyWebSearchProvider,
             "exa": ExaWebSearchProvider, "firecrawl": FirecrawlWebSearchProvider, "parallel": ParallelWebSearchProvider,
             "local": LocalExtractProvider, "ddgs": DDGSWebSearchProvider}

def register(ctx):
    async def probe(provider: str, op: str, arg: str, limit: int = 5):
        p = PROVIDERS[provider]()
        if op == "available":
            return json.dumps(p.is_available())
        if op == "why":
            return json.dumps(p.unavailable_reason())
        if op == "is_async":
            return json.dumps([inspect.iscoroutinefunction(p.search), inspect.iscoroutinefunction(p.extract)])
        if op == "syspath":
            sys.path.insert(0, arg)
            importlib.invalidate_caches()
            return "null"
        if op == "search":
            r = p.search(arg, limit)
        else:
            r = p.extract(arg.split(), query="q", max_chars=limit or 50000)
        if inspect.isawaitable(r):
            r = await r
        return json.dumps(r)
    ctx.register_tool(name="probe", schema={}, handler=probe)
"#;

fn host_for(search: Value) -> (tempfile::TempDir, tempfile::TempDir, Host) {
    host_with_web(json!({ "search": search }))
}

/// A host whose `config.json` has `web` as its `tools.web` block.
fn host_with_web(web: Value) -> (tempfile::TempDir, tempfile::TempDir, Host) {
    let home = tempfile::tempdir().unwrap();
    let config = json!({"plugins": {"enabled": ["probe"]}, "tools": {"web": web}});
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

fn json_body(seen: &Seen) -> Value {
    serde_json::from_str(&seen.body).unwrap()
}

/// Each failure answer, through `op`, gives an error starting with `prefix`
/// and saying what went wrong.
fn assert_failures(host: &Host, service: &Service, provider: &str, prefix: &str) {
    for (reply, says) in failures() {
        service.reply(reply);
        let error = error_of(&probe(host, provider, "search", "q", 5));
        assert!(
            error.starts_with(prefix) && error.contains(says),
            "{error} / {says}"
        );
    }
}

#[test]
fn exa_searches_and_extracts_with_its_key_header() {
    let service = Service::start();
    let (_h, _b, host) = host_for(
        json!({"exa": {"enabled": true, "apiKey": "exa-key", "baseUrl": service.url, "timeout": 0.5}}),
    );
    assert_eq!(probe(&host, "exa", "available", "", 0), json!(true));
    assert_eq!(probe(&host, "exa", "why", "", 0), json!(""));
    // https://docs.exa.ai/reference/search — highlights become the description.
    service.reply(Reply::Json(
        200,
        json!({"requestId": "r1", "resolvedSearchType": "neural", "results": [
            {"id": "https://rust-lang.org", "url": "https://rust-lang.org", "title": "Rust", "score": 0.9,
             "publishedDate": null, "author": null, "highlights": ["fast", "safe"], "highlightScores": [0.5, 0.4]},
            {"id": "https://crates.io", "url": "https://crates.io", "title": "Crates", "highlights": []}
        ], "costDollars": {"total": 0.005}})
        .to_string(),
    ));
    let got = probe(&host, "exa", "search", "rust", 2);
    assert_eq!(
        got,
        json!({"success": true, "data": {"web": [
            {"url": "https://rust-lang.org", "title": "Rust", "description": "fast safe", "position": 1},
            {"url": "https://crates.io", "title": "Crates", "description": "", "position": 2}
        ]}})
    );
    let seen = service.last();
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("POST", "/search")
    );
    assert_eq!(seen.header("x-api-key"), Some("exa-key"));
    assert_eq!(
        json_body(&seen),
        json!({"query": "rust", "numResults": 2, "contents": {"highlights": true}})
    );

    // https://docs.exa.ai/reference/get-contents — failures come as statuses.
    service.reply(Reply::Json(
        200,
        json!({"requestId": "r2", "results": [
            {"id": "https://a.example", "url": "https://a.example", "title": "A", "text": "Page A"}
        ], "statuses": [
            {"id": "https://a.example", "status": "success"},
            {"id": "https://b.example", "status": "error", "error": {"tag": "CRAWL_NOT_FOUND", "httpStatusCode": 404}}
        ]})
        .to_string(),
    ));
    let got = probe(
        &host,
        "exa",
        "extract",
        "https://a.example https://b.example",
        0,
    );
    assert_eq!(
        got,
        json!([
            {"url": "https://a.example", "title": "A", "content": "Page A", "raw_content": "Page A",
             "metadata": {"sourceURL": "https://a.example", "title": "A"}},
            {"url": "https://b.example", "title": "", "content": "", "error": "CRAWL_NOT_FOUND (HTTP 404)"}
        ])
    );
    let seen = service.last();
    assert_eq!(seen.target, "/contents");
    assert_eq!(
        json_body(&seen),
        json!({"urls": ["https://a.example", "https://b.example"], "text": true})
    );
    assert_failures(&host, &service, "exa", "Exa search failed: Exa ");
    service.reply(Reply::Json(200, json!({"nothing": 1}).to_string()));
    assert_eq!(
        error_of(&probe(&host, "exa", "search", "q", 5)),
        "Exa search failed: Exa answered without a results list"
    );
    service.reply(Reply::Json(429, "{}".into()));
    let got = probe(&host, "exa", "extract", "https://a.example", 0);
    assert_eq!(
        got[0]["error"],
        "Exa extract failed: Exa rate limit reached (HTTP 429); try again later"
    );
}

#[test]
fn exa_parallel_and_firecrawl_say_what_they_lack() {
    let (_h, _b, host) = host_for(json!({"exa": {"apiKey": "k"}, "parallel": {"enabled": true}}));
    assert_eq!(probe(&host, "exa", "available", "", 0), json!(false));
    assert_eq!(
        probe(&host, "exa", "why", "", 0),
        json!("not enabled (set tools.web.search.exa.enabled to true)")
    );
    if std::env::var_os("PARALLEL_API_KEY").is_none() {
        assert_eq!(
            probe(&host, "parallel", "why", "", 0),
            json!("no API key (tools.web.search.parallel.apiKey or PARALLEL_API_KEY)")
        );
        assert_eq!(
            error_of(&probe(&host, "parallel", "search", "q", 5)),
            "PARALLEL_API_KEY is not set"
        );
    }
    if std::env::var_os("FIRECRAWL_API_KEY").is_none()
        && std::env::var_os("FIRECRAWL_API_URL").is_none()
    {
        assert_eq!(
            error_of(&probe(&host, "firecrawl", "search", "q", 5)),
            "FIRECRAWL_API_KEY (cloud) or FIRECRAWL_API_URL (self-hosted) is not set"
        );
        let got = probe(&host, "firecrawl", "extract", "https://a.example", 0);
        assert_eq!(
            got[0]["error"],
            "FIRECRAWL_API_KEY (cloud) or FIRECRAWL_API_URL (self-hosted) is not set"
        );
    }
    if std::env::var_os("EXA_API_KEY").is_none() {
        let (_h, _b, host) = host_for(json!({"exa": {"enabled": true}}));
        assert_eq!(
            error_of(&probe(&host, "exa", "search", "q", 5)),
            "EXA_API_KEY is not set"
        );
    }
}

#[test]
fn firecrawl_searches_and_scrapes_asynchronously_and_rechecks_the_final_url() {
    let service = Service::start();
    let (_h, _b, host) = host_for(
        json!({"firecrawl": {"enabled": true, "apiKey": "fc-key", "baseUrl": service.url, "timeout": 0.5}}),
    );
    assert_eq!(
        probe(&host, "firecrawl", "is_async", "", 0),
        json!([false, true])
    );
    // https://docs.firecrawl.dev/api-reference/endpoint/search (v2)
    service.reply(Reply::Json(
        200,
        json!({"success": true, "data": {"web": [
            {"url": "https://rust-lang.org", "title": "Rust", "description": "A language", "position": 1},
            {"url": "https://crates.io", "title": "Crates", "snippet": "Packages"}
        ]}, "creditsUsed": 2})
        .to_string(),
    ));
    let got = probe(&host, "firecrawl", "search", "rust", 2);
    assert_eq!(
        got,
        json!({"success": true, "data": {"web": [
            {"title": "Rust", "url": "https://rust-lang.org", "description": "A language", "position": 1},
            {"title": "Crates", "url": "https://crates.io", "description": "Packages", "position": 2}
        ]}})
    );
    let seen = service.last();
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("POST", "/v2/search")
    );
    assert_eq!(seen.header("Authorization"), Some("Bearer fc-key"));
    assert_eq!(json_body(&seen), json!({"query": "rust", "limit": 2}));

    // https://docs.firecrawl.dev/api-reference/endpoint/scrape (v2)
    service.reply(Reply::Json(
        200,
        json!({"success": true, "data": {"markdown": "# A\n\nText", "metadata": {
            "title": "A", "sourceURL": "https://a.example/final", "statusCode": 200}}})
        .to_string(),
    ));
    // Redirected to the cloud metadata address: refused after the fact.
    service.reply(Reply::Json(
        200,
        json!({"success": true, "data": {"markdown": "secret", "metadata": {
            "title": "", "sourceURL": "http://169.254.169.254/latest", "statusCode": 200}}})
        .to_string(),
    ));
    service.reply(Reply::Json(
        402,
        r#"{"success": false, "error": "Payment required"}"#.into(),
    ));
    let got = probe(
        &host,
        "firecrawl",
        "extract",
        "https://a.example https://b.example https://c.example",
        0,
    );
    assert_eq!(
        got,
        json!([
            {"url": "https://a.example/final", "title": "A", "content": "# A\n\nText", "raw_content": "# A\n\nText",
             "metadata": {"title": "A", "sourceURL": "https://a.example/final", "statusCode": 200}},
            {"url": "http://169.254.169.254/latest", "title": "", "content": "",
             "error": "IP 169.254.169.254 is in blocked private range 169.254.0.0/16"},
            {"url": "https://c.example", "title": "", "content": "", "error": "Firecrawl returned HTTP 402: Payment required"}
        ])
    );
    let seen = service.last();
    assert_eq!(seen.target, "/v2/scrape");
    assert_eq!(
        json_body(&seen),
        json!({"url": "https://c.example", "formats": ["markdown", "html"]})
    );
    assert_failures(
        &host,
        &service,
        "firecrawl",
        "Firecrawl search failed: Firecrawl ",
    );
    service.reply(Reply::Json(
        200,
        r#"{"success": false, "error": "bad query"}"#.into(),
    ));
    assert_eq!(
        error_of(&probe(&host, "firecrawl", "search", "q", 5)),
        "Firecrawl search failed: Firecrawl reported a failure: bad query"
    );

    // Self-hosted: the instance URL, no key, no Authorization header.
    let (_h, _b, host) =
        host_for(json!({"firecrawl": {"enabled": true, "apiUrl": format!("{}/", service.url)}}));
    if std::env::var_os("FIRECRAWL_API_KEY").is_none() {
        assert_eq!(probe(&host, "firecrawl", "available", "", 0), json!(true));
        service.reply(Reply::Json(
            200,
            json!({"success": true, "data": {"web": []}}).to_string(),
        ));
        assert_eq!(
            probe(&host, "firecrawl", "search", "q", 1),
            json!({"success": true, "data": {"web": []}})
        );
        assert_eq!(service.last().header("Authorization"), None);
    }
}

#[test]
fn parallel_searches_and_extracts_with_its_key_and_beta_header() {
    let service = Service::start();
    let (_h, _b, host) = host_for(
        json!({"parallel": {"enabled": true, "apiKey": "par-key", "baseUrl": service.url, "timeout": 0.5}}),
    );
    assert_eq!(probe(&host, "parallel", "available", "", 0), json!(true));
    assert_eq!(
        probe(&host, "parallel", "is_async", "", 0),
        json!([false, true])
    );
    // https://docs.parallel.ai/api-reference/search-beta/search
    service.reply(Reply::Json(
        200,
        json!({"search_id": "s1", "results": [
            {"url": "https://rust-lang.org", "title": "Rust", "excerpts": ["fast", "safe"]}
        ]})
        .to_string(),
    ));
    let got = probe(&host, "parallel", "search", "rust", 50);
    assert_eq!(
        got,
        json!({"success": true, "data": {"web": [
            {"url": "https://rust-lang.org", "title": "Rust", "description": "fast safe", "position": 1}
        ]}})
    );
    let seen = service.last();
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("POST", "/v1beta/search")
    );
    assert_eq!(seen.header("x-api-key"), Some("par-key"));
    assert_eq!(
        seen.header("parallel-beta"),
        Some("search-extract-2025-10-10")
    );
    let body = json_body(&seen);
    assert_eq!(body["objective"], "rust");
    assert_eq!(body["search_queries"], json!(["rust"]));
    assert_eq!(body["max_results"], 20, "capped");
    if std::env::var_os("PARALLEL_SEARCH_MODE").is_none() {
        assert_eq!(body["mode"], "agentic");
    }

    // https://docs.parallel.ai/api-reference/search-beta/extract
    service.reply(Reply::Json(
        200,
        json!({"extract_id": "e1", "results": [
            {"url": "https://a.example", "title": "A", "full_content": "All of A", "excerpts": []},
            {"url": "https://b.example", "title": "B", "full_content": null, "excerpts": ["one", "two"]}
        ], "errors": [{"url": "https://c.example", "error_type": "fetch_error", "http_status_code": 404, "content": null}]})
        .to_string(),
    ));
    let got = probe(
        &host,
        "parallel",
        "extract",
        "https://a.example https://b.example https://c.example",
        0,
    );
    assert_eq!(
        got,
        json!([
            {"url": "https://a.example", "title": "A", "content": "All of A", "raw_content": "All of A",
             "metadata": {"sourceURL": "https://a.example", "title": "A"}},
            {"url": "https://b.example", "title": "B", "content": "one\n\ntwo", "raw_content": "one\n\ntwo",
             "metadata": {"sourceURL": "https://b.example", "title": "B"}},
            {"url": "https://c.example", "title": "", "content": "", "error": "fetch_error"}
        ])
    );
    let seen = service.last();
    assert_eq!(seen.target, "/v1beta/extract");
    assert_eq!(
        json_body(&seen),
        json!({"urls": ["https://a.example", "https://b.example", "https://c.example"], "full_content": true})
    );
    assert_failures(
        &host,
        &service,
        "parallel",
        "Parallel search failed: Parallel ",
    );
    service.reply(Reply::Hang(Duration::from_secs(3)));
    let got = probe(&host, "parallel", "extract", "https://a.example", 0);
    assert_eq!(
        got[0]["error"],
        "Parallel extract failed: Parallel did not answer within 0.5 s"
    );
}

const PAGE: &str = "<!doctype html><html><head><title>The Page</title><style>p{}</style></head>\
<body><nav>menu</nav><article><h1>Heading</h1><p>First paragraph with <a href=\"https://x.example\">a link</a>.</p>\
<ul><li>one</li><li>two</li></ul><script>alert(1)</script></article></body></html>";

#[test]
fn local_extracts_readable_text_and_refuses_private_addresses_unless_allowed() {
    let service = Service::start();
    // Refused by Flowly's rule: loopback, localhost, link-local, other schemes.
    let (_h, _b, host) = host_with_web(json!({}));
    assert_eq!(
        probe(&host, "local", "is_async", "", 0),
        json!([false, true])
    );
    let page = format!("{}/page", service.url);
    let got = probe(
        &host,
        "local",
        "extract",
        &format!("{page} http://localhost:1/x http://[fe80::1]/ ftp://a.example/ http://10.1.2.3/"),
        0,
    );
    let errors: Vec<&str> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["error"].as_str().unwrap())
        .collect();
    assert_eq!(
        errors,
        [
            "IP 127.0.0.1 is in blocked private range 127.0.0.0/8",
            "Localhost access is blocked",
            "IP fe80::1 is in blocked private range fe80::/10",
            "Scheme 'ftp' not allowed (only http/https)",
            "IP 10.1.2.3 is in blocked private range 10.0.0.0/8",
        ]
    );
    assert!(
        service.seen.lock().unwrap().is_empty(),
        "nothing was fetched"
    );

    // Allowed by tools.web.allowPrivateUrls: fetched, reduced to readable text.
    let (_h, _b, host) = host_with_web(json!({"allowPrivateUrls": true}));
    service.reply(Reply::Page(200, "text/html; charset=utf-8", PAGE.into()));
    let got = probe(&host, "local", "extract", &page, 0);
    assert_eq!(got[0]["url"], page.as_str());
    assert_eq!(got[0]["title"], "The Page");
    assert_eq!(
        got[0]["content"],
        "# The Page\n\n# Heading\nFirst paragraph with [a link](https://x.example).\n\n- one\n- two"
    );
    assert_eq!(got[0]["metadata"]["sourceURL"], page.as_str());
    let seen = service.last();
    assert_eq!(
        (seen.method.as_str(), seen.target.as_str()),
        ("GET", "/page")
    );
    // A page that never comes: that URL's error, within local.timeout.
    let (_h, _b, slow) =
        host_with_web(json!({"allowPrivateUrls": true, "search": {"local": {"timeout": 0.5}}}));
    service.reply(Reply::Hang(Duration::from_secs(3)));
    let got = probe(&slow, "local", "extract", &page, 0);
    assert_eq!(
        got[0]["error"],
        format!("{page} did not answer within 0.5 s")
    );
    // A failing page is that URL's error; metadata hosts stay refused.
    service.reply(Reply::Page(404, "text/html", "gone".into()));
    let got = probe(
        &host,
        "local",
        "extract",
        &format!("{page} http://metadata.google.internal/"),
        0,
    );
    assert_eq!(got[0]["error"], format!("HTTP 404 fetching {page}"));
    assert_eq!(
        got[1]["error"],
        "Host 'metadata.google.internal' is blocked (cloud metadata endpoint)"
    );
}

const FAKE_DDGS: &str = r#"
class DDGS:
    def __init__(self, timeout=None):
        self.timeout = timeout
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return False
    def text(self, query, max_results=5):
        if query == "boom":
            raise RuntimeError("ratelimited")
        for i in range(10):
            yield {"title": f"{query} {i}", "href": f"https://{i}.example", "body": f"body {i}"}
"#;

#[test]
fn ddgs_is_used_only_when_its_package_is_importable() {
    let (_h, _b, host) = host_for(json!({"ddgs": {"enabled": true}}));
    // Without the package (unless this interpreter really has it).
    let why = probe(&host, "ddgs", "why", "", 0);
    if why != json!("") {
        assert_eq!(probe(&host, "ddgs", "available", "", 0), json!(false));
        assert_eq!(
            why,
            json!("the ddgs package is not installed (pip install ddgs into plughost's Python)")
        );
        assert_eq!(
            error_of(&probe(&host, "ddgs", "search", "q", 5)),
            "ddgs package is not installed — run `pip install ddgs`"
        );
    }
    // A ddgs package on the path: used, its hits mapped to Flowly's rows.
    let fake = tempfile::tempdir().unwrap();
    std::fs::create_dir(fake.path().join("ddgs")).unwrap();
    std::fs::write(fake.path().join("ddgs/__init__.py"), FAKE_DDGS).unwrap();
    probe(&host, "ddgs", "syspath", fake.path().to_str().unwrap(), 0);
    assert_eq!(probe(&host, "ddgs", "available", "", 0), json!(true));
    let got = probe(&host, "ddgs", "search", "rust", 2);
    assert_eq!(
        got,
        json!({"success": true, "data": {"web": [
            {"title": "rust 0", "url": "https://0.example", "description": "body 0", "position": 1},
            {"title": "rust 1", "url": "https://1.example", "description": "body 1", "position": 2}
        ]}})
    );
    assert_eq!(
        error_of(&probe(&host, "ddgs", "search", "boom", 2)),
        "DuckDuckGo search failed: ratelimited"
    );
    // Not enabled: unavailable whatever is installed.
    let (_h, _b, host) = host_for(json!({}));
    assert_eq!(
        probe(&host, "ddgs", "why", "", 0),
        json!("not enabled (set tools.web.search.ddgs.enabled to true)")
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
