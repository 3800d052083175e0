//! What an environment of its own costs a plugin (issue 23): the load time
//! and memory of one plugin importing one package, in the shared
//! environment (in-process) against its own environment (a worker on a
//! virtualenv).
//!
//! `cargo bench --bench plugin_env` (needs uv: `pip install uv`). The
//! plugins are installed by the plughost binary from a wheel written here,
//! offline. The interpreter is started first (a host with no plugin), so
//! both numbers are the plugin's own: for the shared environment, the time
//! `Host::build` takes and the growth of this process's resident memory;
//! for its own, the time `Host::build` takes (the worker's start, its
//! interpreter, the import) and the worker's resident memory. The in-process
//! load is measured once (a module imports once per process); the worker's
//! is the median of `PLUGHOST_BENCH_ROUNDS` (default 5). This executable is
//! its own worker ([`plughost::isolation::serve_if_worker`]).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use plughost::Host;

const PLUGIN: &str = "import pinlib\n\ndef register(ctx):\n    ctx.register_tool(\"env_version\", {}, lambda: pinlib.VERSION)\n";

const MAKE_WHEEL: &str = r#"
import base64, hashlib, os, sys, zipfile
out, name, version = sys.argv[1:4]
dist = f"{name}-{version}.dist-info"
files = {f"{name}/__init__.py": f"VERSION = {version!r}\nDATA = list(range(100000))\n",
         f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
         f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
record = []
with zipfile.ZipFile(os.path.join(out, f"{name}-{version}-py3-none-any.whl"), "w") as z:
    for n, text in files.items():
        z.writestr(n, text)
        d = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{n},sha256={d},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
"#;

fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn install(home: &Path, work: &Path, empty: &Path, extra: &[&str]) {
    std::fs::create_dir_all(home.join("plugins")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .args(["plugins", "install"])
        .arg(work.join("src/envbench"))
        .arg("--enable")
        .args(extra)
        .env("PLUGHOST_HOME", home)
        .env("PLUGHOST_BUNDLED_DIR", empty)
        .env("UV_FIND_LINKS", work.join("wheels"))
        .env("UV_NO_INDEX", "1")
        .env("UV_OFFLINE", "1")
        .env("UV_CACHE_DIR", work.join("uv-cache"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "install failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn build(home: &Path, empty: &Path) -> (Host, f64) {
    let start = Instant::now();
    let host = Host::builder()
        .home(home)
        .bundled_dir(empty)
        .build()
        .unwrap();
    (host, start.elapsed().as_secs_f64() * 1000.0)
}

fn main() {
    plughost::isolation::serve_if_worker();
    let work = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(work.path().join("wheels")).unwrap();
    let made = Command::new("python3")
        .args(["-c", MAKE_WHEEL])
        .arg(work.path().join("wheels"))
        .args(["pinlib", "1.0"])
        .status()
        .unwrap();
    assert!(made.success());
    let src = work.path().join("src/envbench");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("plugin.yaml"), "name: envbench\nversion: 1.0.0\n").unwrap();
    std::fs::write(src.join("__init__.py"), PLUGIN).unwrap();
    std::fs::write(src.join("requirements.txt"), "pinlib==1.0\n").unwrap();
    let shared = work.path().join("home-shared");
    let own = work.path().join("home-own");
    install(&shared, work.path(), empty.path(), &[]);
    install(&own, work.path(), empty.path(), &["--own-env"]);

    // Start the interpreter first: both numbers are then the plugin's own.
    let idle = work.path().join("home-idle");
    std::fs::create_dir_all(idle.join("plugins")).unwrap();
    let warm = Host::builder()
        .home(&idle)
        .bundled_dir(empty.path())
        .build()
        .unwrap();
    warm.runtime().interpreter().unwrap();
    drop(warm);

    let me = std::process::id();
    let before = resident_kib(me);
    let (host, shared_ms) = build(&shared, empty.path());
    let shared_kib = resident_kib(me).saturating_sub(before);
    assert!(host
        .plugins()
        .iter()
        .any(|p| p.key == "envbench" && p.loaded));
    drop(host);

    let rounds: usize = std::env::var("PLUGHOST_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut times = Vec::new();
    let mut worker_kib = Vec::new();
    for _ in 0..rounds.max(1) {
        let (host, ms) = build(&own, empty.path());
        let status = host.worker_status("envbench").expect("it runs in a worker");
        worker_kib.push(resident_kib(status.pid.expect("a running worker")));
        times.push(ms);
        drop(host);
    }
    times.sort_by(f64::total_cmp);
    worker_kib.sort();
    let own_ms = times[times.len() / 2];
    let own_kib = worker_kib[worker_kib.len() / 2];
    println!("plugin environment: load time and memory of one plugin importing one package");
    println!("  shared environment (in-process): load {shared_ms:.1} ms, +{shared_kib} KiB resident in the host");
    println!("  own environment (worker):        load {own_ms:.1} ms (median of {}), worker resident {own_kib} KiB", times.len());
}
