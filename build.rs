//! Make the binary find the libpython it was built against at run time
//! (an rpath to pyo3's lib_dir), so the loader never picks a different
//! system libpython and the user's site-packages stay visible.
fn main() {
    // `Py_LIMITED_API` and the `Py_3_*` cfgs, for the stable-ABI build
    // (`--features abi3`: a wheel whose module any CPython >= 3.10 loads,
    // which workers on another Python import; docs/isolation.md).
    pyo3_build_config::use_pyo3_cfgs();
    let config = pyo3_build_config::get();
    if let Some(lib_dir) = config.lib_dir() {
        if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("windows") {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
        }
    }
    // What this script must watch is only what the crate embeds without
    // rustc tracking it: `include_dir!("plugins_bundled")` (untracked on
    // stable Rust), watched as a directory so an added file counts too.
    // The Python sources under python/plughost are embedded with
    // `include_str!`, which rustc records as dependencies of the crate
    // itself; watching that directory here made every `maturin develop`
    // (which writes the extension module into it) and every `__pycache__`
    // rebuild the binary for nothing.
    // The interpreter the crate is built against, for reading its
    // `sys.path` in a child process while the embedded one has not started
    // (a host of native parts only must not start it; runtime/mod.rs).
    let version = config.version();
    if let Some(executable) = config.executable() {
        let executable = base_interpreter(executable, version.major, version.minor);
        println!("cargo:rustc-env=PLUGHOST_BUILD_PYTHON={executable}");
    }
    println!(
        "cargo:rustc-env=PLUGHOST_BUILD_PYTHON_VERSION={}.{}",
        version.major, version.minor
    );
    link_binary_for_start_up();
    println!("cargo:rerun-if-changed=plugins_bundled");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
}

/// The interpreter whose `sys.path` the embedded libpython has: a
/// virtualenv's `python` (a build inside an activated virtualenv) stands for
/// the base interpreter its `pyvenv.cfg` names (`home = DIR`), as the
/// embedded interpreter adds the virtualenv's site-packages itself.
fn base_interpreter(executable: &str, major: u8, minor: u8) -> String {
    let exe = std::path::Path::new(executable);
    let cfg = exe
        .parent()
        .and_then(|bin| bin.parent())
        .map(|venv| venv.join("pyvenv.cfg"));
    let home = cfg
        .and_then(|cfg| std::fs::read_to_string(cfg).ok())
        .and_then(|text| {
            text.lines().find_map(|line| {
                let (key, value) = line.split_once('=')?;
                (key.trim() == "home").then(|| value.trim().to_string())
            })
        });
    home.map(|dir| std::path::Path::new(&dir).join(format!("python{major}.{minor}")))
        .filter(|base| base.is_file())
        .map_or_else(
            || executable.to_string(),
            |base| base.to_string_lossy().into_owned(),
        )
}

/// Link the `plughost` command so that a start touches few pages of it
/// (issue 26, item 3: its resident memory and start-up page faults).
/// Binaries only: the wheel's extension module is linked as before. Each
/// option is kept only if this build's rustc, linker and C library take it
/// (a probe program is linked with it and run), so an older glibc, another
/// linker or a cross build links as before; `PLUGHOST_NO_LINK_ORDER=1`
/// turns both off.
fn link_binary_for_start_up() {
    let env = |key: &str| std::env::var(key).unwrap_or_default();
    println!("cargo:rerun-if-changed=link/startup-order.txt");
    println!("cargo:rerun-if-env-changed=PLUGHOST_NO_LINK_ORDER");
    if env("CARGO_CFG_TARGET_OS") != "linux"
        || env("CARGO_CFG_TARGET_ENV") != "gnu"
        || env("HOST") != env("TARGET")
        || !env("PLUGHOST_NO_LINK_ORDER").is_empty()
    {
        return;
    }
    // Relocations packed (DT_RELR, glibc >= 2.36): ld.so reads a few KiB
    // instead of ~1 MiB of `.rela.dyn`.
    let relr = ["-Wl,-z,pack-relative-relocs".to_string()];
    if links_and_runs(&relr) {
        for arg in relr {
            println!("cargo:rustc-link-arg-bins={arg}");
        }
    }
    // The functions a start runs, first and together in `.text`
    // (link/record-startup-order.sh says how the list is made). Its names
    // are of release builds of this Cargo.lock; LLD takes the option.
    let order = std::path::Path::new(&env("CARGO_MANIFEST_DIR")).join("link/startup-order.txt");
    if env("PROFILE") != "release" || !order.is_file() {
        return;
    }
    let ordering = [
        "-Xlinker".to_string(),
        format!("--symbol-ordering-file={}", order.display()),
        "-Xlinker".to_string(),
        "--no-warn-symbol-ordering".to_string(),
    ];
    if links_and_runs(&ordering) {
        for arg in ordering {
            println!("cargo:rustc-link-arg-bins={arg}");
        }
    }
}

/// Whether an empty program, linked by this build's rustc with its
/// RUSTFLAGS and `args`, links and runs.
fn links_and_runs(args: &[String]) -> bool {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    let (source, program) = (out.join("link_probe.rs"), out.join("link_probe"));
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let mut link = std::process::Command::new(rustc);
    link.arg(&source).arg("-o").arg(&program);
    link.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    for arg in args {
        link.arg(format!("-Clink-arg={arg}"));
    }
    let quiet = |c: &mut std::process::Command| {
        c.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    quiet(&mut link) && quiet(&mut std::process::Command::new(&program))
}
