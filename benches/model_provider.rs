//! A turn through a plugin's model provider against the same turn through
//! `--model openai:stub-large`, all at the same OpenAI-compatible stub on
//! loopback, interleaved in one run:
//! - a Hermes `kind: model-provider` plugin's profile (`--model
//!   stubcloud:stub-large`): what the profile costs per turn (its headers,
//!   its key lookup) next to the built-in provider;
//! - a Felix model provider (`--model felixstub:stub-large`), whose client
//!   is the plugin's Python code: it posts each request to the stub itself
//!   (the standard library's HTTP client, in a thread), so its row is what
//!   a model call through plugin code costs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Instant;

use plughost::agent::provider::{self, ProviderOptions};
use plughost::agent::{Agent, AgentConfig, Inbound};
use plughost::core::model_profiles::ModelProfiles;
use plughost::Host;

/// An OpenAI-compatible stub answering every request with a short stream.
fn stub() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":null}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
                let _ = stream.write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{sse}", sse.len()).as_bytes(),
                );
            });
        }
    });
    url
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let url = stub();
    let work = tempfile::tempdir().unwrap();
    let home = work.path().join("home");
    let plugin = home.join("plugins/stubcloud");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(
        plugin.join("plugin.yaml"),
        "name: stubcloud\nkind: model-provider\nversion: 1.0.0\n",
    )
    .unwrap();
    std::fs::write(
        plugin.join("__init__.py"),
        format!(
            "from providers import register_provider\nfrom providers.base import ProviderProfile\n\
             register_provider(ProviderProfile(name='stubcloud', env_vars=('STUBCLOUD_API_KEY',), base_url='{url}', \
             default_headers={{'X-Title': 'bench'}}, fallback_models=('stub-large',)))\n"
        ),
    )
    .unwrap();
    felix_plugin(&home, &url);
    std::fs::write(
        home.join("config.json"),
        r#"{"plugins": {"enabled": ["stubcloud", "felixstub"]}}"#,
    )
    .unwrap();
    let empty = work.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::env::set_var("STUBCLOUD_API_KEY", "sk-bench");
    let host = Arc::new(
        Host::builder()
            .home(&home)
            .bundled_dir(&empty)
            .build()
            .unwrap(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(plughost::runtime::thread_started)
        .enable_all()
        .build()
        .unwrap();
    let _entered = rt.enter();
    let profiles: Option<Arc<ModelProfiles>> = host.extensions().peek();
    assert!(profiles.as_ref().is_some_and(|p| p.has("stubcloud")));
    let agent = |spec: &str, base_url: Option<String>| {
        let options = ProviderOptions {
            base_url,
            profiles: profiles.clone(),
            ..Default::default()
        };
        let provider = provider::from_spec(spec, &options).unwrap();
        Agent::new(host.clone(), provider, AgentConfig::default(), None)
    };
    let plugin_agent = agent("stubcloud:stub-large", None);
    let felix_agent = agent("felixstub:stub-large", None);
    let builtin_agent = agent("openai:stub-large", Some(url.clone()));
    let turns = 300;
    let (mut plugin_ms, mut felix_ms, mut builtin_ms) = (Vec::new(), Vec::new(), Vec::new());
    rt.block_on(async {
        for i in 0..20 {
            for (agent, tag) in [
                (&plugin_agent, "wp"),
                (&felix_agent, "wf"),
                (&builtin_agent, "wb"),
            ] {
                agent
                    .send(Inbound::new(&format!("{tag}-{i}"), "hi"), None)
                    .await;
            }
        }
        for i in 0..turns {
            for (agent, times, tag) in [
                (&plugin_agent, &mut plugin_ms, "p"),
                (&felix_agent, &mut felix_ms, "f"),
                (&builtin_agent, &mut builtin_ms, "b"),
            ] {
                let start = Instant::now();
                let r = agent
                    .send(Inbound::new(&format!("{tag}-{i}"), "hi"), None)
                    .await;
                times.push(start.elapsed().as_secs_f64() * 1e3);
                assert_eq!(r.reply.as_deref(), Some("ok"), "{:?}", r.error);
            }
        }
    });
    let (p, f, b) = (median(plugin_ms), median(felix_ms), median(builtin_ms));
    println!("model_provider: {turns} turns each, interleaved, same loopback stub");
    println!("  Hermes profile (stubcloud:stub-large): median {p:.3} ms/turn");
    println!("  Felix provider (felixstub:stub-large): median {f:.3} ms/turn");
    println!("  built-in       (openai:stub-large):    median {b:.3} ms/turn");
    println!("  ratio Hermes profile / built-in: {:.3}", p / b);
    println!("  ratio Felix provider / built-in: {:.3}", f / b);
}

/// A Felix plugin (an entry point in a `pyproject.toml` tree, as Felix's
/// example plugin ships) whose model provider's client posts each chat to
/// `url` and reads the streamed answer, in a thread.
fn felix_plugin(home: &std::path::Path, url: &str) {
    let tree = home.join("plugins/felix-felixstub");
    std::fs::create_dir_all(tree.join("src/felix_felixstub")).unwrap();
    std::fs::write(
        tree.join("pyproject.toml"),
        "[project]\nname = \"felix-felixstub\"\nversion = \"0.1.0\"\n\n[project.entry-points.\"felix.plugins\"]\nfelixstub = \"felix_felixstub:register\"\n",
    )
    .unwrap();
    let code = format!(
        r#"import asyncio, json, urllib.request
from felix_ai.types import ChatMessage, ModelChatResult, TokenUsage

URL = "{url}/chat/completions"


def _post(body):
    request = urllib.request.Request(URL, data=json.dumps(body).encode(),
                                     headers={{"Content-Type": "application/json"}})
    with urllib.request.urlopen(request) as answer:
        text = ""
        for line in answer.read().decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:]).get("choices", []):
                    text += choice.get("delta", {{}}).get("content") or ""
        return text


class StubClient:
    def __init__(self, model_id):
        self.model_id = model_id

    async def chat(self, messages, tools, opts=None):
        body = {{"model": self.model_id, "stream": True,
                "messages": [{{"role": m.role, "content": m.content}} for m in messages]}}
        text = await asyncio.to_thread(_post, body)
        return ModelChatResult(message=ChatMessage(role="assistant", content=text),
                               stop_reason="end_turn", usage=TokenUsage(input=1, output=1))


def register(registry):
    registry.register_model_provider("felixstub", lambda model_id, route, spec, settings: StubClient(model_id))
"#
    );
    std::fs::write(tree.join("src/felix_felixstub/__init__.py"), code).unwrap();
}
