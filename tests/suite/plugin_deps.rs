//! A plugin's dependencies (issue 23 items 1–2), through the real CLI
//! binary and real uv: tiny distributions are built here as wheels and
//! served from a local directory (`UV_FIND_LINKS`, `UV_NO_INDEX`,
//! `UV_OFFLINE`), so nothing leaves the machine. uv must be installed
//! (`pip install uv`; `.ci/run` does): without it these tests fail saying so.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{home_with, no_bundled, write_plugin};
use serde_json::Value;

/// Writes `name-version-py3-none-any.whl` files by hand (zipfile): a module
/// `name` whose `VERSION` is the version, with `Requires-Dist` lines.
const MAKE_WHEEL: &str = r#"
import base64, hashlib, os, sys, zipfile
out = sys.argv[1]
for spec in sys.argv[2:]:
    name, version, *requires = spec.split(":")
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s"
        % (name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: plughost-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(os.path.join(out, f"{name}-{version}-py3-none-any.whl"), "w") as z:
        for n, text in files.items():
            data = text.encode()
            z.writestr(n, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{n},sha256={digest},{len(data)}")
        record.append(f"{dist}/RECORD,,")
        z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
"#;

struct Env {
    home: tempfile::TempDir,
    bundled: tempfile::TempDir,
    /// Wheels, the uv cache, plugin sources.
    work: tempfile::TempDir,
}

fn env() -> Env {
    let env = Env {
        home: home_with(&[]),
        bundled: no_bundled(),
        work: tempfile::tempdir().unwrap(),
    };
    std::fs::create_dir_all(env.wheels()).unwrap();
    let out = Command::new("python3")
        .arg("-c")
        .arg(MAKE_WHEEL)
        .arg(env.wheels())
        .args(["pinlib:1.0", "pinlib:2.0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    env
}

impl Env {
    fn wheels(&self) -> PathBuf {
        self.work.path().join("wheels")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
        cmd.args(args)
            .env("PLUGHOST_HOME", self.home.path())
            .env("PLUGHOST_BUNDLED_DIR", self.bundled.path())
            .env("UV_FIND_LINKS", self.wheels())
            .env("UV_NO_INDEX", "1")
            .env("UV_OFFLINE", "1")
            .env("UV_CACHE_DIR", self.work.path().join("uv-cache"))
            .env_remove("PLUGHOST_LOG")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
            .env_remove("VIRTUAL_ENV")
            .env_remove("PLUGHOST_WHEELS");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        stdout(&out)
    }

    fn lock(&self) -> Value {
        let text = std::fs::read_to_string(self.home.path().join("plugins.lock.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// A Flowly plugin `name` whose tool `<name>_version` answers the
    /// `pinlib` version it imports; `deps` are its extra files.
    fn plugin(&self, name: &str, deps: &[(&str, &str)]) -> PathBuf {
        let code = format!(
            "import pinlib\n\ndef register(ctx):\n    ctx.register_tool(\"{name}_version\", {{}}, lambda: pinlib.VERSION)\n"
        );
        let mut files = vec![("__init__.py", code.as_str())];
        files.extend_from_slice(deps);
        write_plugin(
            &self.work.path().join("src"),
            name,
            &format!("name: {name}\nversion: 1.0.0\nprovides_tools: [{name}_version]\n"),
            &files,
        )
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn conflicting_pins_are_refused_in_the_shared_env_and_both_work_once_one_has_its_own() {
    let env = env();
    let old = env.plugin("old", &[("requirements.txt", "pinlib==1.0\n")]);
    let new = env.plugin(
        "new",
        &[(
            "pyproject.toml",
            "[project]\nname = \"new\"\nversion = \"1.0\"\ndependencies = [\"pinlib==2.0\"]\n",
        )],
    );
    let out = env.run(&["plugins", "install", s(&old), "--enable"]);
    assert!(out.status.success(), "{}", text(&out));
    let said = stdout(&out);
    assert!(said.contains("shared environment"), "{said}");
    // uv's progress, a line per step, as it goes (it was swallowed).
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(
        progress.contains("installing the plugins' requirements in the shared environment (uv):")
            && progress.contains("  + pinlib==1.0"),
        "{progress}"
    );
    assert_eq!(env.ok(&["tools", "call", "old_version"]), "1.0\n");
    let entry = &env.lock()["plugins"]["old"];
    assert_eq!(entry["environment"], "shared", "{entry}");
    assert_eq!(entry["requirements"], serde_json::json!(["pinlib==1.0"]));
    assert_eq!(entry["dependencies"], serde_json::json!({"pinlib": "1.0"}));
    let link = std::fs::read_link(env.home.path().join("envs/shared")).unwrap();

    // The conflict: refused, both plugins and both requirements named, and
    // nothing changed.
    let out = env.run(&["plugins", "install", s(&new), "--enable"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("plugin 'old' requires pinlib==1.0 and plugin 'new' requires pinlib==2.0"),
        "{err}"
    );
    assert!(err.contains("unsatisfiable"), "uv's own words: {err}");
    assert!(err.contains("--own-env"), "{err}");
    assert!(!env.home.path().join("plugins/new").exists());
    assert_eq!(
        std::fs::read_link(env.home.path().join("envs/shared")).unwrap(),
        link
    );
    assert_eq!(env.ok(&["tools", "call", "old_version"]), "1.0\n");

    // Its own environment: it runs isolated on it, beside the other.
    let said = env.ok(&["plugins", "install", s(&new), "--enable", "--own-env"]);
    assert!(
        said.contains("Its own environment runs on Python 3."),
        "{said}"
    );
    assert_eq!(env.lock()["plugins"]["new"]["environment"], "own");
    assert_eq!(
        env.lock()["plugins"]["new"]["dependencies"]["pinlib"],
        "2.0"
    );
    let script = env.work.path().join("turn.yaml");
    std::fs::write(
        &script,
        "turns:\n  - say: calling both\n    tool_calls:\n      - name: old_version\n        args: {}\n      - name: new_version\n        args: {}\n  - say: \"got {tool_results}\"\n",
    )
    .unwrap();
    let turn = env.ok(&["run", "go", "--script", s(&script), "--json"]);
    let report: Value = serde_json::from_str(&turn).unwrap();
    let results: Vec<String> = report["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["result"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(results, ["1.0", "2.0"], "{report}");
    let listed = env.ok(&["plugins", "list", "--json"]);
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let new_record = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "new")
        .unwrap();
    assert_eq!(new_record["isolated"], true, "{new_record}");
}

#[test]
fn a_failed_resolution_keeps_the_environment_in_use() {
    let env = env();
    let old = env.plugin("old", &[("requirements.txt", "pinlib==1.0\n")]);
    env.ok(&["plugins", "install", s(&old), "--enable"]);
    let link = std::fs::read_link(env.home.path().join("envs/shared")).unwrap();
    // A new version of the plugin needing a release that does not exist.
    std::fs::write(old.join("requirements.txt"), "pinlib==3.0\n").unwrap();
    let out = env.run(&["plugins", "install", s(&old), "--enable", "--force"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("left as it was"), "{err}");
    assert!(err.contains("pinlib==3.0"), "{err}");
    assert_eq!(
        std::fs::read_link(env.home.path().join("envs/shared")).unwrap(),
        link
    );
    let installed =
        std::fs::read_to_string(env.home.path().join("plugins/old/requirements.txt")).unwrap();
    assert_eq!(installed, "pinlib==1.0\n");
    assert_eq!(env.ok(&["tools", "call", "old_version"]), "1.0\n");
    // No half-built environment left beside it.
    let builds = std::fs::read_dir(env.home.path().join("envs"))
        .unwrap()
        .filter(|e| {
            let n = e.as_ref().unwrap().file_name();
            n.to_string_lossy().starts_with(".shared-")
        })
        .count();
    assert_eq!(builds, 1);
}

#[test]
fn deps_sync_installs_for_plugins_already_present_and_lock_reproduces_versions() {
    let env = env();
    // Placed by hand: nothing installed its dependencies.
    let dir = env.plugin("hand", &[]);
    let target = env.home.path().join("plugins/hand");
    std::fs::rename(&dir, &target).unwrap();
    std::fs::write(target.join("requirements.txt"), "pinlib\n").unwrap();
    // It cannot load before its dependencies are installed: enabled anyway.
    env.ok(&["plugins", "enable", "hand", "--force"]);
    let out = env.run(&["tools", "call", "hand_version"]);
    assert!(!out.status.success(), "{}", text(&out));
    let said = env.ok(&["plugins", "deps", "sync"]);
    assert!(said.contains("1 plugin(s)"), "{said}");
    assert_eq!(env.ok(&["tools", "call", "hand_version"]), "2.0\n");

    // --from-lock installs the versions the lock records, not the newest.
    let src = env.plugin("pinned", &[("requirements.txt", "pinlib\n")]);
    let other = Env {
        home: home_with(&[]),
        bundled: no_bundled(),
        work: tempfile::tempdir().unwrap(),
    };
    std::fs::create_dir_all(other.wheels()).unwrap();
    let only_old = "pinlib-1.0-py3-none-any.whl";
    std::fs::copy(env.wheels().join(only_old), other.wheels().join(only_old)).unwrap();
    other.ok(&["plugins", "install", s(&src), "--enable"]);
    assert_eq!(
        other.lock()["plugins"]["pinned"]["dependencies"]["pinlib"],
        "1.0"
    );
    let lock_file = other.home.path().join("plugins.lock.json");
    let fresh = Env {
        home: home_with(&[]),
        bundled: no_bundled(),
        work: tempfile::tempdir().unwrap(),
    };
    std::fs::create_dir_all(fresh.wheels()).unwrap();
    for w in ["pinlib-1.0-py3-none-any.whl", "pinlib-2.0-py3-none-any.whl"] {
        std::fs::copy(env.wheels().join(w), fresh.wheels().join(w)).unwrap();
    }
    fresh.ok(&[
        "plugins",
        "install",
        "--from-lock",
        s(&lock_file),
        "--enable",
    ]);
    assert_eq!(fresh.ok(&["tools", "call", "pinned_version"]), "1.0\n");
}

#[test]
fn without_uv_the_error_says_how_to_get_it() {
    let env = env();
    let old = env.plugin("old", &[("requirements.txt", "pinlib==1.0\n")]);
    let out = env
        .command(&["plugins", "install", s(&old)])
        .env("PLUGHOST_UV", env.work.path().join("no-such-uv"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pip install uv"),
        "{}",
        text(&out)
    );
    assert!(!env.home.path().join("plugins/old").exists());
}

/// A CPython 3.`minor` of this machine, found as a user's machine offers
/// it: `python3.N` on PATH, then pyenv's versions.
fn python_3(minor: u32) -> Option<PathBuf> {
    let mut paths: Vec<PathBuf> = std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(format!("python3.{minor}")))
        .collect();
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))?;
    if let Ok(entries) = std::fs::read_dir(pyenv.join("versions")) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&format!("3.{minor}.")) || name == format!("3.{minor}") {
                paths.push(e.path().join("bin/python3"));
            }
        }
    }
    // A pyenv shim answers for versions it will not run: each one is tried.
    paths.into_iter().find(|p| {
        Command::new(p)
            .args([
                "-c",
                &format!("import sys; assert sys.version_info[:2] == (3, {minor})"),
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// A directory holding plughost's stable-ABI wheel (`cp310-abi3`, which
/// every CPython from 3.10 imports), named by PLUGHOST_TEST_WHEELS
/// (tests/run_all.sh builds it: `maturin build --features abi3`).
fn abi3_wheel() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("PLUGHOST_TEST_WHEELS")?);
    let found = std::fs::read_dir(&dir).ok()?.flatten().any(|e| {
        let n = e.file_name().to_string_lossy().into_owned();
        n.starts_with("plughost-") && n.contains("-abi3-")
    });
    found.then_some(dir)
}

/// Where the test's plughost wheel is put for the install to find it.
#[derive(Clone, Copy)]
enum WheelAt {
    /// A directory named in PLUGHOST_WHEELS.
    Wheels,
    /// The package index uv is set to use (its find-links stand in for
    /// one here: the tests reach no network): what a user of the bare
    /// binary, with no wheel at hand, gets.
    Index,
}

/// A plugin whose `requires-python` only CPython 3.`minor` meets (it uses
/// 3.12 syntax) runs in a worker on that interpreter, with plughost's
/// stable-ABI wheel: `plugins install` picks the interpreter and says so.
fn a_plugin_needing_another_python_runs_in_a_worker_on_it(minor: u32, at: WheelAt) {
    let env = env();
    let code = "import sys\n\ntype Answer = str  # Python 3.12 syntax\n\ndef register(ctx):\n    ctx.register_tool(\"py_version\", {}, lambda: '%d.%d' % sys.version_info[:2])\n";
    let spec = format!(">=3.{minor},<3.{}", minor + 1);
    let pyproject = format!(
        "[project]\nname = \"newpy\"\nversion = \"1.0\"\nrequires-python = \"{spec}\"\ndependencies = [\"pinlib==1.0\"]\n"
    );
    let src = write_plugin(
        &env.work.path().join("src"),
        "newpy",
        "name: newpy\nversion: 1.0.0\nprovides_tools: [py_version]\n",
        &[("__init__.py", code), ("pyproject.toml", &pyproject)],
    );
    let Some(python) = python_3(minor) else {
        common::missing(
            &format!("a CPython 3.{minor} (python3.{minor} on PATH or under pyenv)"),
            &format!("pyenv install 3.{minor}, or apt-get install python3.{minor}"),
        );
    };
    // Another plughost version's wheel, left in <home>/wheels by an earlier
    // install, is never taken: its worker would speak another protocol.
    let wheels_dir = env.home.path().join("wheels");
    std::fs::create_dir_all(&wheels_dir).unwrap();
    std::fs::write(
        wheels_dir.join("plughost-0.0.1-cp310-abi3-manylinux_2_34_x86_64.whl"),
        "not a wheel: taking it would fail the install",
    )
    .unwrap();
    // With no wheel anywhere, here or on the index: the error says where
    // to put one and how to get it, and nothing is installed.
    let out = env.run(&["plugins", "install", s(&src), "--enable"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        !stdout(&out).contains("Installing plughost"),
        "{}",
        text(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    for hint in [
        format!("could not install plughost=={version} from the package index"),
        format!("Put the wheel in {}", wheels_dir.display()),
        format!("pip download plughost=={version} --only-binary=:all: --python-version 3.{minor}"),
        "maturin build --release --features abi3 --out".to_string(),
    ] {
        assert!(err.contains(&hint), "{hint:?} not in: {err}");
    }
    assert!(!env.home.path().join("plugins/newpy").exists());
    let Some(wheels) = abi3_wheel() else {
        common::missing(
            &format!(
                "plughost's stable-ABI wheel, for the CPython 3.{minor} at {}",
                python.display()
            ),
            "maturin build --features abi3 --out DIR, then PLUGHOST_TEST_WHEELS=DIR",
        );
    };
    // No --own-env: install picks the interpreter by itself and says which.
    let mut install = env.command(&["plugins", "install", s(&src), "--enable"]);
    match at {
        WheelAt::Wheels => {
            install.env("PLUGHOST_WHEELS", &wheels);
        }
        WheelAt::Index => {
            for wheel in std::fs::read_dir(&wheels).unwrap().flatten() {
                let name = wheel.file_name();
                if name.to_string_lossy().starts_with("plughost-") {
                    std::fs::copy(wheel.path(), env.wheels().join(name)).unwrap();
                }
            }
        }
    }
    let out = install.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let said = stdout(&out);
    let from = match at {
        WheelAt::Wheels => "Its worker runs plughost's wheel ".to_string(),
        WheelAt::Index => {
            format!("Installing plughost=={version} from the package index for its worker")
        }
    };
    assert!(said.contains(&from), "{said}");
    // plughost is the host's: the lock pins the plugin's packages only.
    let locked = &env.lock()["plugins"]["newpy"]["dependencies"];
    assert!(locked.get("pinlib").is_some(), "{locked}");
    assert!(locked.get("plughost").is_none(), "{locked}");
    assert!(said.contains(&format!("requires Python {spec}")), "{said}");
    assert!(
        said.contains(&format!("runs on Python 3.{minor}.")),
        "{}",
        text(&out)
    );
    assert_eq!(
        env.ok(&["tools", "call", "py_version"]),
        format!("3.{minor}\n")
    );
    let doctor = env.ok(&["plugins", "doctor"]);
    assert!(doctor.contains("own environment"), "{doctor}");
}

#[test]
fn a_plugin_needing_python_312_runs_in_a_worker_on_another_cpython() {
    a_plugin_needing_another_python_runs_in_a_worker_on_it(12, WheelAt::Wheels);
}

#[test]
fn a_plugin_needing_python_313_runs_in_a_worker_on_another_cpython_with_plughost_from_the_index() {
    a_plugin_needing_another_python_runs_in_a_worker_on_it(13, WheelAt::Index);
}

#[test]
fn a_hermes_manifests_pip_dependencies_install_and_an_isolated_plugin_gets_its_own_env() {
    let env = env();
    let code = "import json\nimport pinlib\n\ndef answer(args, **kwargs):\n    return json.dumps({\"pinlib\": pinlib.VERSION})\n\ndef register(ctx):\n    ctx.register_tool(\"hermes_pin\", \"demo\", {\"name\": \"hermes_pin\", \"description\": \"d\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}, answer)\n";
    let src = write_plugin(
        &env.work.path().join("src"),
        "herm",
        "name: herm\nversion: 1.0.0\npip_dependencies:\n  - pinlib==2.0\n",
        &[("__init__.py", code)],
    );
    let said = env.ok(&["plugins", "install", s(&src), "--enable"]);
    assert!(said.contains("Loads as a hermes plugin"), "{said}");
    assert!(
        said.contains("(pinlib==2.0) in the shared environment"),
        "{said}"
    );
    assert!(
        env.ok(&["tools", "call", "hermes_pin"])
            .contains("\"pinlib\": \"2.0\""),
        "{}",
        env.ok(&["tools", "call", "hermes_pin"])
    );

    // A plugin plugins.isolate names gets an environment of its own
    // without being asked.
    let config =
        serde_json::json!({"plugins": {"enabled": ["herm"], "disabled": [], "isolate": ["iso"]}});
    std::fs::write(env.home.path().join("config.json"), config.to_string()).unwrap();
    let iso = env.plugin("iso", &[("requirements.txt", "pinlib==1.0\n")]);
    let said = env.ok(&["plugins", "install", s(&iso), "--enable"]);
    assert!(
        said.contains("Its own environment runs on Python"),
        "{said}"
    );
    assert_eq!(env.lock()["plugins"]["iso"]["environment"], "own");
    assert_eq!(env.ok(&["tools", "call", "iso_version"]), "1.0\n");
    // Removing it deletes its environment.
    env.ok(&["plugins", "remove", "iso", "-y"]);
    assert!(!env.home.path().join("envs/plugins/iso").exists());
}

/// The shared environment goes on `sys.path` before the interpreter's own
/// site-packages, so the versions its plugins were resolved with win over
/// packages the interpreter has too. (`site.addsitedir` alone appends it
/// last, which is what a failed placement left: the packages were found,
/// so only the order shows the difference.)
#[test]
fn the_shared_environment_comes_before_the_interpreters_site_packages() {
    let env = env();
    let code = "import sys\nimport pinlib\n\ndef where():\n    shared = [i for i, p in enumerate(sys.path) if '/envs/' in p]\n    own = [i for i, p in enumerate(sys.path) if p.endswith(('site-packages', 'dist-packages')) and '/envs/' not in p]\n    return '%d %d' % (shared[0] if shared else -1, own[0] if own else -1)\n\ndef register(ctx):\n    ctx.register_tool('where', {}, where)\n";
    let src = write_plugin(
        &env.work.path().join("src"),
        "order",
        "name: order\nversion: 1.0.0\nprovides_tools: [where]\n",
        &[("__init__.py", code), ("requirements.txt", "pinlib==1.0\n")],
    );
    env.ok(&["plugins", "install", s(&src), "--enable"]);
    let answer = env.ok(&["tools", "call", "where"]);
    let (shared, own) = answer
        .trim()
        .split_once(' ')
        .map(|(a, b)| (a.parse::<i64>().unwrap(), b.parse::<i64>().unwrap()))
        .unwrap();
    assert!(
        shared >= 0,
        "the shared environment is not on sys.path: {answer}"
    );
    assert!(
        own >= 0,
        "the embedded interpreter has no site-packages on sys.path (uv is installed there by .ci/run): {answer}"
    );
    assert!(
        shared < own,
        "shared environment at {shared}, own site-packages at {own}"
    );
}
