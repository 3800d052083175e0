//! Hermes providers backing a tool: a fake image provider written in
//! Hermes's shape (`agent.image_gen_provider.ImageGenProvider`) gives the
//! agent `image_generate`; its response dict is the tool's result; one
//! that raises gives Hermes's error response; `image_gen.provider` picks
//! the active one and `plugins doctor` says which is active.

use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{run_bounded, write_plugin};
use serde_json::Value;

const FAKE: &str = r#"
from agent.image_gen_provider import ImageGenProvider, success_response
from agent.tts_provider import TTSProvider
from agent.transcription_provider import TranscriptionProvider

class Fake(ImageGenProvider):
    @property
    def name(self):
        return "fake"

    def generate(self, prompt, aspect_ratio="landscape", *, image_url=None, reference_image_urls=None, **kw):
        if "explode" in prompt:
            raise RuntimeError("render farm on fire")
        return success_response(image="/tmp/fake-%s.png" % aspect_ratio, model="fake-1",
                                prompt=prompt, aspect_ratio=aspect_ratio, provider=self.name)

class Voice(TTSProvider):
    name = "fakevoice"

    def synthesize(self, text, output_path, *, voice=None, model=None, speed=None, format="mp3", **extra):
        with open(output_path, "wb") as f:
            f.write(b"ID3" + text.encode())
        return output_path

class Ears(TranscriptionProvider):
    name = "fakeears"

    def transcribe(self, file_path, *, model=None, language=None, **extra):
        with open(file_path, "rb") as f:
            data = f.read()
        return {"success": True, "transcript": data[3:].decode() + "/" + str(language), "provider": self.name}

def register(ctx):
    ctx.register_image_gen_provider(Fake())
    ctx.register_tts_provider(Voice())
    ctx.register_transcription_provider(Ears())
"#;

const OTHER: &str = r#"
from agent.image_gen_provider import ImageGenProvider

class Other(ImageGenProvider):
    name = "other"
    def generate(self, prompt, aspect_ratio="landscape", **kw):
        raise AssertionError("never the active provider")

def register(ctx):
    ctx.register_image_gen_provider(Other())
"#;

struct Env {
    plughost_home: tempfile::TempDir,
    hermes_home: tempfile::TempDir,
    bundled: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env {
            plughost_home: tempfile::tempdir().unwrap(),
            hermes_home: tempfile::tempdir().unwrap(),
            bundled: tempfile::tempdir().unwrap(),
        };
        std::fs::write(
            env.hermes_home.path().join("config.yaml"),
            "plugins:\n  enabled: [fake-images, other-images]\nimage_gen:\n  provider: fake\n",
        )
        .unwrap();
        let plugins = env.hermes_home.path().join("plugins");
        write_plugin(
            &plugins,
            "fake-images",
            "name: fake-images\n",
            &[("__init__.py", FAKE)],
        );
        write_plugin(
            &plugins,
            "other-images",
            "name: other-images\n",
            &[("__init__.py", OTHER)],
        );
        env
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.plughost_home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("HERMES_HOME", self.hermes_home.path())
            .env_remove("PLUGHOST_LOG")
            .env_remove("HERMES_ENABLE_PROJECT_PLUGINS")
            .env_remove("HERMES_SAFE_MODE");
        run_bounded(cmd, Duration::from_secs(60))
    }

    fn turn(&self, prompt: &str) -> Value {
        self.call(
            "image_generate",
            &format!("{{prompt: \"{prompt}\", aspect_ratio: square}}"),
        )
    }

    fn call(&self, tool: &str, args: &str) -> Value {
        let script = self.plughost_home.path().join("script.yaml");
        let text = format!(
            "turns:\n  - tool_calls:\n      - name: {tool}\n        args: {args}\n  - say: \"{{tool_results}}\"\n"
        );
        std::fs::write(&script, text).unwrap();
        let out = self.run(
            &["run", "draw", "--json", "--model", "scripted", "--script"]
                .into_iter()
                .chain([script.to_str().unwrap()])
                .collect::<Vec<_>>(),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

#[test]
fn the_active_image_provider_backs_image_generate() {
    let env = Env::new();
    let turn = env.turn("a red fox");
    let calls = turn["model_calls"].as_array().unwrap();
    assert!(calls[0]["tools"]
        .as_array()
        .unwrap()
        .contains(&"image_generate".into()));
    let result: Value = serde_json::from_str(turn["reply"].as_str().unwrap()).unwrap();
    assert_eq!(
        result,
        serde_json::json!({"success": true, "image": "/tmp/fake-square.png", "model": "fake-1",
            "prompt": "a red fox", "aspect_ratio": "square", "modality": "text", "provider": "fake"})
    );
}

#[test]
fn a_provider_that_raises_gives_hermes_error_response() {
    let env = Env::new();
    let turn = env.turn("explode");
    let result: Value = serde_json::from_str(turn["reply"].as_str().unwrap()).unwrap();
    assert_eq!(result["success"], false, "{result:#}");
    assert_eq!(result["error"], "RuntimeError: render farm on fire");
    assert_eq!(result["provider"], "fake");
}

#[test]
fn doctor_says_which_provider_is_active() {
    let env = Env::new();
    let out = env.run(&["plugins", "doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("image_gen provider 'fake': active (backs the image_generate tool)"),
        "{text}"
    );
    assert!(
        text.contains("image_gen provider 'other': not active: image_gen.provider is 'fake'"),
        "{text}"
    );
}

#[test]
fn the_active_tts_provider_backs_text_to_speech() {
    let env = Env::new();
    let turn = env.call("text_to_speech", "{text: \"hello there\"}");
    let result: Value = serde_json::from_str(turn["reply"].as_str().unwrap()).unwrap();
    assert_eq!(result["success"], true, "{result:#}");
    assert_eq!(result["provider"], "fakevoice");
    let path = std::path::PathBuf::from(result["file_path"].as_str().unwrap());
    assert!(
        path.starts_with(env.hermes_home.path().join("cache").join("audio")),
        "{path:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"ID3hello there");
    assert_eq!(result["media_tag"], format!("MEDIA:{}", path.display()));
}

#[test]
fn the_active_transcription_provider_backs_transcribe_audio() {
    let env = Env::new();
    let audio = env.plughost_home.path().join("clip.mp3");
    std::fs::write(&audio, b"ID3good morning").unwrap();
    let args = format!("{{file_path: \"{}\", language: en}}", audio.display());
    let turn = env.call("transcribe_audio", &args);
    let result: Value = serde_json::from_str(turn["reply"].as_str().unwrap()).unwrap();
    assert_eq!(
        result,
        serde_json::json!({"success": true, "transcript": "good morning/en", "provider": "fakeears"})
    );
}
