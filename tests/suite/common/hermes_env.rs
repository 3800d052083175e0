//! A plughost home and a Hermes home for one test, with the real binary
//! run over them: the Hermes compatibility tests' shared environment.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use super::{home_with, no_bundled, run_bounded, write_plugin};
use serde_json::Value;

pub struct HermesEnv {
    pub home: tempfile::TempDir,
    pub hermes: tempfile::TempDir,
    pub bundled: tempfile::TempDir,
    src: tempfile::TempDir,
}

impl HermesEnv {
    /// Empty homes, Hermes's `config.yaml` being `config_yaml`.
    pub fn new(config_yaml: &str) -> HermesEnv {
        let env = HermesEnv {
            home: home_with(&[]),
            hermes: tempfile::tempdir().unwrap(),
            bundled: no_bundled(),
            src: tempfile::tempdir().unwrap(),
        };
        std::fs::write(env.hermes.path().join("config.yaml"), config_yaml).unwrap();
        env
    }

    /// `plughost ARGS` over the homes; plugins log to [`HermesEnv::log`].
    pub fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes.path())
            .env("PROBE_LOG", self.log())
            .env_remove("PLUGHOST_LOG")
            .env_remove("PYTHONPATH")
            .env_remove("XAI_API_KEY")
            .env_remove("HERMES_ENABLE_PROJECT_PLUGINS")
            .env_remove("HERMES_SAFE_MODE");
        run_bounded(cmd, Duration::from_secs(90))
    }

    /// The command's stdout and stderr; it must succeed.
    pub fn output(&self, args: &[&str]) -> (String, String) {
        let out = self.run(args);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(out.status.success(), "{args:?}: {stdout}{stderr}");
        (stdout, stderr)
    }

    /// The command's stdout; it must succeed.
    pub fn ok(&self, args: &[&str]) -> String {
        self.output(args).0
    }

    /// A plugin directory outside both homes, to install.
    pub fn source(&self, name: &str, manifest: &str, files: &[(&str, &str)]) -> PathBuf {
        write_plugin(self.src.path(), name, manifest, files)
    }

    /// `plugins install --enable DIR` (no `--dialect`): what it said.
    pub fn install(&self, dir: &Path) -> String {
        let (out, err) = self.output(&["plugins", "install", "--enable", dir.to_str().unwrap()]);
        out + &err
    }

    /// One scripted turn saying `hello back`; its stderr.
    pub fn turn(&self, message: &str) -> String {
        let script = self.home.path().join("say.yaml");
        std::fs::write(&script, "turns:\n  - say: \"hello back\"\n").unwrap();
        let script = script.to_string_lossy().into_owned();
        let args = ["run", message, "--model", "scripted", "--script", &script];
        self.output(&args).1
    }

    /// Where plugins write their probe lines (`PROBE_LOG`).
    pub fn log(&self) -> PathBuf {
        self.home.path().join("probe.log")
    }

    /// The probe lines, as written.
    pub fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The probe lines, each parsed as JSON.
    pub fn json_lines(&self) -> Vec<Value> {
        self.lines()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

/// `text` parsed as JSON (trimmed), or a panic naming it.
pub fn json(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}
