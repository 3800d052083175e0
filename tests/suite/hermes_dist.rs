//! A Hermes plugin shipped as a pip-installed distribution (issue 21's
//! tests): a wheel built here with the standard library, exposing the
//! `hermes_agent.plugins` entry point, installed offline with pip into a
//! target directory; its tool — registered positionally, handler
//! `(args, **kw)` as Hermes's are — runs in an agent turn (`plughost run`)
//! and through `plughost serve`'s `/v1/chat/completions`, both with the
//! scripted model.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{home_with, no_bundled, run_bounded};
use serde_json::{json, Value};

const MODULE: &str = r#"
import json

def shout(args, **kwargs):
    return json.dumps({"shouted": args.get("text", "").upper(), "task": "task_id" in kwargs})

def register(ctx):
    ctx.register_tool("dist_shout", "distdemo",
        {"name": "dist_shout", "description": "Shout the text",
         "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
        shout)
"#;

const BUILD_WHEEL: &str = r#"
import base64, hashlib, sys, zipfile
out, module = sys.argv[1], sys.argv[2]
files = {
    "hermes_dist_demo/__init__.py": open(module).read(),
    "hermes_dist_demo-1.4.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: hermes-dist-demo\nVersion: 1.4.0\nSummary: A Hermes plugin as a distribution\n",
    "hermes_dist_demo-1.4.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: plughost-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "hermes_dist_demo-1.4.0.dist-info/entry_points.txt": "[hermes_agent.plugins]\ndistdemo = hermes_dist_demo\n",
}
record = []
with zipfile.ZipFile(out + "/hermes_dist_demo-1.4.0-py3-none-any.whl", "w") as z:
    for name, text in files.items():
        data = text.encode()
        z.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("hermes_dist_demo-1.4.0.dist-info/RECORD,,")
    z.writestr("hermes_dist_demo-1.4.0.dist-info/RECORD", "\n".join(record) + "\n")
"#;

const SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: dist_shout
        args: {text: "from a wheel"}
  - say: "done: {tool_results}"
"#;

struct Env {
    home: tempfile::TempDir,
    hermes: tempfile::TempDir,
    bundled: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Env {
    fn command(&self, site: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes.path())
            .env("PYTHONPATH", site)
            .env_remove("VIRTUAL_ENV")
            .env_remove("PLUGHOST_LOG");
        cmd
    }

    fn script(&self) -> PathBuf {
        let path = self.work.path().join("script.yaml");
        std::fs::write(&path, SCRIPT).unwrap();
        path
    }
}

/// The wheel, pip-installed offline into `<work>/site`; `None` (the reason
/// printed) when this machine's Python has no pip.
fn installed() -> Option<(Env, PathBuf)> {
    let env = Env {
        home: home_with(&[]),
        hermes: tempfile::tempdir().unwrap(),
        bundled: no_bundled(),
        work: tempfile::tempdir().unwrap(),
    };
    let has_pip = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_pip {
        common::missing(
            "pip for python3",
            "apt-get install python3-pip, or python3 -m ensurepip",
        );
    }
    let work = env.work.path();
    let module = work.join("module.py");
    std::fs::write(&module, MODULE).unwrap();
    let built = Command::new("python3")
        .args(["-c", BUILD_WHEEL])
        .arg(work)
        .arg(&module)
        .output()
        .unwrap();
    assert!(built.status.success(), "{:?}", built);
    let site = work.join("site");
    let pip = Command::new("python3")
        .args(["-m", "pip", "install", "-q", "--no-index", "--target"])
        .arg(&site)
        .arg(work.join("hermes_dist_demo-1.4.0-py3-none-any.whl"))
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .output()
        .unwrap();
    assert!(pip.status.success(), "{:?}", pip);
    assert!(site
        .join("hermes_dist_demo-1.4.0.dist-info/entry_points.txt")
        .is_file());
    std::fs::write(
        env.hermes.path().join("config.yaml"),
        "plugins:\n  enabled: [distdemo]\n",
    )
    .unwrap();
    Some((env, site))
}

#[test]
fn a_pip_installed_hermes_distribution_runs_its_tool_in_an_agent_turn() {
    let Some((env, site)) = installed() else {
        return;
    };
    let out = run_bounded(
        env.command(&site, &["plugins", "list", "--json"]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{out:?}");
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let dist = list.iter().find(|p| p["key"] == "distdemo").unwrap();
    assert_eq!(dist["source"], "entrypoint", "{dist:#}");
    assert_eq!(dist["dialect"], "hermes");
    assert_eq!(dist["version"], "1.4.0");
    assert_eq!(dist["tools"], json!(["dist_shout"]));

    let script = env.script();
    let ws = env.work.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let out = run_bounded(
        env.command(
            &site,
            &[
                "run",
                "go",
                "--json",
                "--model",
                "scripted",
                "--script",
                script.to_str().unwrap(),
                "--workspace",
                ws.to_str().unwrap(),
            ],
        ),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let turn: Value = serde_json::from_slice(&out.stdout).unwrap();
    let call = &turn["tool_calls"][0];
    assert_eq!(call["outcome"], "ok", "{turn:#}\n{stderr}");
    let result: Value = serde_json::from_str(call["result"].as_str().unwrap()).unwrap();
    assert_eq!(result["shouted"], "FROM A WHEEL", "{turn:#}");
    assert_eq!(result["task"], true, "Hermes passes task_id to **kwargs");
    assert!(turn.to_string().contains("done: "), "{turn:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pip_installed_hermes_distribution_answers_through_serve() {
    let Some((env, site)) = installed() else {
        return;
    };
    let script = env.script();
    let child = env
        .command(
            &site,
            &[
                "serve",
                "--port",
                "0",
                "--model",
                "scripted",
                "--script",
                script.to_str().unwrap(),
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, body) = common::chat_once(child, "go").await;
    assert_eq!(status, 200, "{body:#}");
    let reply = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(reply.contains("FROM A WHEEL"), "{body:#}");
}
