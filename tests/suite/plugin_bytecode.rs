//! What runs is what the install lock covers (issue 51, item 2): a plugin's
//! sources. A `__pycache__/*.pyc` forged beside them (its header matching
//! the source's size and time, so CPython's own loader would take it) and
//! a bare `x.pyc` where no `x.py` is are never run; plughost keeps plugin
//! bytecode in its own cache, keyed by the content hash.
use crate::common;

use std::path::Path;
use std::process::Command;

const INIT: &str = r#"from . import helper

def find_extra():
    try:
        from . import extra as e
        return e.WHO
    except ImportError:
        return "no-extra"

def register(ctx):
    ctx.register_tool("which", {}, lambda: "real " + helper.WHO + " " + find_extra())
"#;

/// Write, with `python3`, a timestamp `.pyc` of `forged` source for
/// `target` (where CPython looks for it, its header taken from the real
/// source), or a bare `<name>.pyc` when `target` does not exist.
fn forge(target: &Path, forged: &str) {
    let script = r#"
import importlib.util, importlib._bootstrap_external as be, os, sys
target, forged = sys.argv[1], sys.argv[2]
code = compile(forged, target, "exec")
if os.path.exists(target):
    st = os.stat(target)
    data = be._code_to_timestamp_pyc(code, st.st_mtime, st.st_size)
    out = importlib.util.cache_from_source(target)
else:
    data = be._code_to_timestamp_pyc(code, 0, 0)
    out = target[:-3] + ".pyc"
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "wb") as f:
    f.write(data)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(target)
        .arg(forged)
        .env_remove("PYTHONPATH")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_forged_pyc_beside_a_plugins_sources_never_runs() {
    let home = common::home_with(&["forge"]);
    let bundled = common::no_bundled();
    let cache = tempfile::tempdir().unwrap();
    let plugins = home.path().join("plugins");
    let dir = common::write_plugin(
        &plugins,
        "forge",
        "name: forge\nversion: 1.0.0\nprovides_tools: [which]\n",
        &[
            ("__init__.py", INIT),
            ("helper.py", "WHO = 'real-helper'\n"),
        ],
    );
    forge(
        &dir.join("__init__.py"),
        "def register(ctx):\n    ctx.register_tool('which', {}, lambda: 'forged')\n",
    );
    forge(&dir.join("helper.py"), "WHO = 'forged-helper'\n");
    forge(&dir.join("extra.py"), "WHO = 'forged-extra'\n");
    // The forgeries are good ones: CPython's own import system runs them.
    let plain = Command::new("python3")
        .args(["-B", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import forge.helper as h, forge.extra as e; print(h.WHO, e.WHO)"])
        .arg(&plugins)
        .env_remove("PYTHONPATH")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout).trim(),
        "forged-helper forged-extra",
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let call = || {
        let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
            .args(["tools", "call", "which"])
            .env("PLUGHOST_HOME", home.path())
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .env("XDG_CACHE_HOME", cache.path())
            .env_remove("PLUGHOST_LOG")
            .env_remove("PYTHONDONTWRITEBYTECODE")
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    // Compiled from the sources, then read from plughost's own cache.
    for _ in 0..2 {
        let answer = call();
        assert!(answer.contains("real real-helper no-extra"), "{answer}");
    }
    let cached = std::fs::read_dir(cache.path().join("plughost/plugin-bytecode"))
        .unwrap()
        .count();
    assert_eq!(cached, 2, "the plugin's two modules, keyed by content");
}
