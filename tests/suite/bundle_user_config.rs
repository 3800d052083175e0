//! A Claude Code plugin's `userConfig` options at `plugins install`
//! (issue 48, item 4): without a terminal, plughost names the options that
//! have no value and how to set them in `config.json`; once set there,
//! nothing is asked; on a terminal (a pseudo-terminal made by `script`)
//! each is asked for, a `sensitive` one without echo, and recorded in
//! `config.json`, never printed.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::run_bounded;
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(60);

fn write_optioned(dir: &Path) {
    std::fs::create_dir_all(dir.join(".claude-plugin")).unwrap();
    std::fs::write(
        dir.join(".claude-plugin/plugin.json"),
        json!({"name": "optioned", "version": "1.0.0", "userConfig": {
            "token": {"title": "API token", "description": "An API token", "sensitive": true},
            "region": {"description": "Where", "default": "eu"},
            "account": {"description": "Your account name"}
        }})
        .to_string(),
    )
    .unwrap();
}

struct Case {
    root: tempfile::TempDir,
}

impl Case {
    fn new() -> Case {
        let case = Case {
            root: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(case.home()).unwrap();
        std::fs::create_dir_all(case.path("bundled")).unwrap();
        write_optioned(&case.source());
        case
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }
    fn home(&self) -> PathBuf {
        self.path("home")
    }
    fn source(&self) -> PathBuf {
        self.path("src/optioned")
    }
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(self.root.path())
            .env("PLUGHOST_HOME", self.home())
            .env("PLUGHOST_BUNDLED_DIR", self.path("bundled"))
            .env_remove("PLUGHOST_LOG")
            .env_remove("CLAUDE_PLUGIN_OPTION_TOKEN")
            .env_remove("CLAUDE_PLUGIN_OPTION_ACCOUNT");
        cmd
    }
    fn install(&self) -> String {
        let mut cmd = self.command(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(["plugins", "install", "--force"])
            .arg(self.source())
            .stdin(Stdio::null());
        let out = run_bounded(cmd, LIMIT);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn config(&self) -> Value {
        std::fs::read_to_string(self.home().join("config.json"))
            .map(|text| serde_json::from_str(&text).unwrap())
            .unwrap_or_else(|_| json!({"plugins": {}}))
    }
}

#[test]
fn without_a_terminal_install_names_the_unset_options_and_where_to_set_them() {
    let case = Case::new();
    let said = case.install();
    assert!(
        said.contains("Plugin 'optioned' has options without a value"),
        "{said}"
    );
    assert!(said.contains("plugins.user_config.optioned"), "{said}");
    assert!(
        said.contains(
            "token: API token, a secret (or the environment variable CLAUDE_PLUGIN_OPTION_TOKEN)"
        ),
        "{said}"
    );
    assert!(said.contains("account: Your account name"), "{said}");
    // An option with a default is not asked for.
    assert!(!said.contains("region:"), "{said}");
    // Set in config.json, nothing is left to say.
    let mut config = case.config();
    config["plugins"]["user_config"] = json!({"optioned": {"token": "t0k", "account": "me"}});
    std::fs::write(case.home().join("config.json"), config.to_string()).unwrap();
    let said = case.install();
    assert!(!said.contains("options without a value"), "{said}");
    assert!(!said.contains("t0k"), "{said}");
}

/// The output of a process, read as it comes.
fn collect(mut from: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    seen
}

fn wait_for(seen: &Mutex<Vec<u8>>, text: &str) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        let now = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
        if now.contains(text) {
            return now;
        }
        assert!(Instant::now() < deadline, "no '{text}' in: {now}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn on_a_terminal_install_asks_for_each_option_and_never_echoes_a_secret() {
    let case = Case::new();
    let Ok(script) = which("script") else {
        crate::common::missing(
            "util-linux's script (a pseudo-terminal)",
            "apt-get install util-linux",
        )
    };
    let line = format!(
        "'{}' plugins install '{}'",
        env!("CARGO_BIN_EXE_plughost"),
        case.source().display()
    );
    let mut child = case
        .command(&script)
        .args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let seen = collect(child.stdout.take().unwrap());
    let _errors = collect(child.stderr.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    let secret = "s3cr3t-never-shown";
    // Answered only once asked: typed earlier, the terminal would echo it.
    for _ in 0..2 {
        let now = wait_for_either(&seen, &["(token, hidden): ", "(account): "]);
        let answer = if now == "(token, hidden): " {
            secret
        } else {
            "me-myself"
        };
        writeln!(stdin, "{answer}").unwrap();
        stdin.flush().unwrap();
        wait_for(
            &seen,
            &format!(
                "saved {}",
                now.trim_start_matches('(')
                    .split([',', ')'])
                    .next()
                    .unwrap()
            ),
        );
    }
    drop(stdin);
    let status = child.wait().unwrap();
    let out = wait_for(&seen, "saved");
    assert!(status.success(), "{out}");
    assert!(!out.contains(secret), "the secret was shown: {out}");
    assert!(out.contains("me-myself"), "a plain answer is echoed: {out}");
    let config = case.config();
    assert_eq!(
        config["plugins"]["user_config"]["optioned"]["token"],
        secret
    );
    assert_eq!(
        config["plugins"]["user_config"]["optioned"]["account"],
        "me-myself"
    );
}

/// The first of `prompts` that has appeared and not been answered yet.
fn wait_for_either(seen: &Mutex<Vec<u8>>, prompts: &[&'static str]) -> &'static str {
    let deadline = Instant::now() + LIMIT;
    loop {
        let now = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
        // The last prompt shown is the one waiting.
        let waiting = prompts
            .iter()
            .filter_map(|p| now.rfind(p).map(|at| (at, *p)))
            .max();
        if let Some((at, p)) = waiting {
            if !now[at..].contains("saved") {
                return p;
            }
        }
        assert!(Instant::now() < deadline, "no prompt in: {now}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn which(name: &str) -> Result<String, ()> {
    let path = std::env::var_os("PATH").ok_or(())?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
        .ok_or(())
}
