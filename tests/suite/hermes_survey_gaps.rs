//! Gaps the survey of public Hermes plugins found (issue 52 item 4), each
//! in the shape of the plugin that showed it: an image-generation backend
//! that imports `save_url_image` from `agent.image_gen_provider` (Polza's)
//! and is installed without `--dialect` (its only Hermes sign is that
//! import, as Volcengine's backends), on disk, through the real binary.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded, write_plugin};
use serde_json::Value;

const BACKEND: &str = r#"
import json
from agent.image_gen_provider import ImageGenProvider, save_url_image

class Stub(ImageGenProvider):
    @property
    def name(self):
        return "stubimg"

    def generate(self, prompt, aspect_ratio="landscape", **kwargs):
        return {"success": True}

def fetch(args, **kwargs):
    out = {}
    path = save_url_image(args["url"], prefix="stub_gen")
    out["suffix"] = path.suffix
    out["bytes"] = path.read_bytes().decode()
    out["prefix"] = path.name.startswith("stub_gen_")
    try:
        save_url_image(args["empty"])
    except ValueError as e:
        out["empty"] = str(e)
    return json.dumps(out)

def register(ctx):
    ctx.register_image_gen_provider(Stub())
    ctx.register_tool("fetch_image", "media", {"name": "fetch_image", "parameters": {"type": "object", "properties": {"url": {"type": "string"}, "empty": {"type": "string"}}}}, fetch)
"#;

/// Serves `/img.webp` (a few bytes, `image/webp`) and `/empty.png` (none).
fn image_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            let _ = reader.read_line(&mut first);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
            }
            let body = if first.contains("/img.webp") {
                "WEBPDATA"
            } else {
                ""
            };
            let _ = stream.write_all(
                format!("HTTP/1.1 200 OK\r\nContent-Type: image/webp\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes(),
            );
        }
    });
    url
}

#[test]
fn an_image_backend_installs_as_hermes_and_saves_a_url_image() {
    let url = image_server();
    let home = home_with(&[]);
    let bundled = no_bundled();
    let hermes = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let dir = write_plugin(
        src.path(),
        "stubimg",
        "name: stubimg\nversion: 1.0.0\nkind: backend\n",
        &[("__init__.py", BACKEND)],
    );
    let command = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", home.path())
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .env("HERMES_HOME", hermes.path())
            .env_remove("PLUGHOST_LOG");
        run_bounded(cmd, Duration::from_secs(90))
    };
    let out = command(&["plugins", "install", "--enable", dir.to_str().unwrap()]);
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("agent.image_gen_provider"), "{said}");
    let args =
        serde_json::json!({"url": format!("{url}/img.webp"), "empty": format!("{url}/empty.png")});
    let out = command(&["tools", "call", "fetch_image", "--args", &args.to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(v["suffix"], ".webp", "{v:#}");
    assert_eq!(v["bytes"], "WEBPDATA");
    assert_eq!(v["prefix"], true);
    assert!(
        v["empty"].as_str().unwrap().contains("returned 0 bytes"),
        "{v:#}"
    );
}
