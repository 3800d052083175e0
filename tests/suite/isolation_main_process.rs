//! An isolated plugin's dependencies never reach the main process (issue
//! 47 item 3): the home's shared environment, where `plugins install` puts
//! third-party plugins' dependencies, goes on plughost's own `sys.path`
//! (its `.pth` files run there) only when a third-party plugin runs
//! in-process. Bundled plugins in-process start Python all the same.
use crate::common;

use std::path::Path;
use std::process::Command;

const PLUGIN: &str = r#"
import os
import pthdep

def register(ctx):
    ctx.register_tool("dep_pid", {"type": "object", "properties": {}}, lambda: f"{os.getpid()} {pthdep.ORIGIN}")
"#;

const PTH: &str = "import os; open(os.path.join(os.environ['PLUGHOST_HOME_FOR_TEST'], 'pth.log'), 'a').write(f'{os.getpid()}\\n')\n";

/// A home whose plugin `depuser` imports `pthdep` from the shared
/// environment, which also holds a `.pth` file noting each process that
/// runs it.
fn home() -> tempfile::TempDir {
    let home = common::home_with(&["depuser"]);
    let plugin = home.path().join("plugins").join("depuser");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(plugin.join("plugin.yaml"), "name: depuser\n").unwrap();
    std::fs::write(plugin.join("__init__.py"), PLUGIN).unwrap();
    let site = home
        .path()
        .join("envs")
        .join("shared")
        .join("site-packages");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("pthdep.py"), "ORIGIN = 'shared'\n").unwrap();
    std::fs::write(site.join("zz_plughost_test.pth"), PTH).unwrap();
    home
}

/// `tools call dep_pid` with `isolate` (the bundled plugins load
/// in-process, so plughost's own interpreter starts): its pid, the pid the
/// tool answered from, and the pids that ran the `.pth` file.
fn call(home: &Path, isolate: &str) -> (u64, u64, Vec<u64>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_plughost"));
    cmd.arg("--home")
        .arg(home)
        .args(["tools", "call", "dep_pid", "--isolate", isolate])
        .env("PLUGHOST_HOME_FOR_TEST", home)
        .env_remove("PYTHONPATH")
        .env_remove("PLUGHOST_ISOLATE");
    let (pid, out) = crate::common::run_bounded_pid(cmd, std::time::Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answered: u64 = stdout
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {stdout}"));
    assert!(
        stdout.contains("shared"),
        "the dependency imported: {stdout}"
    );
    let ran = std::fs::read_to_string(home.join("pth.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    (pid, answered, ran)
}

#[test]
fn an_isolated_plugins_shared_environment_stays_out_of_the_main_process() {
    let isolated = home();
    let (main, answered, ran) = call(isolated.path(), "depuser");
    assert_ne!(answered, main, "the tool ran in its worker");
    assert!(!ran.contains(&main), "the .pth ran in plughost: {ran:?}");

    // The same plugin in-process: the environment is on plughost's path,
    // its .pth ran there (what the check above would have seen).
    let here = home();
    let (main, answered, ran) = call(here.path(), "none");
    assert_eq!(answered, main, "the tool ran in-process");
    assert!(ran.contains(&main), "the .pth ran in plughost: {ran:?}");
}
