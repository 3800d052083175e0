//! Make the binary find the libpython it was built against at run time
//! (an rpath to pyo3's lib_dir), so the loader never picks a different
//! system libpython and the user's site-packages stay visible.
fn main() {
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
    if let Some(executable) = config.executable() {
        println!("cargo:rustc-env=PLUGHOST_BUILD_PYTHON={executable}");
    }
    let version = config.version();
    println!(
        "cargo:rustc-env=PLUGHOST_BUILD_PYTHON_VERSION={}.{}",
        version.major, version.minor
    );
    link_binary_for_start_up();
    println!("cargo:rerun-if-changed=plugins_bundled");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
}

/// Link the `plughost` command so that a start touches few pages of it
/// (issue 26, item 3: its resident memory and start-up page faults).
/// Binaries only: the wheel's extension module is linked as before.
fn link_binary_for_start_up() {
    let env = |key: &str| std::env::var(key).unwrap_or_default();
    if env("CARGO_CFG_TARGET_OS") != "linux" || env("CARGO_CFG_TARGET_ENV") != "gnu" {
        return;
    }
    // Relocations packed (DT_RELR, glibc >= 2.36; older linkers ignore the
    // option): ld.so reads a few KiB instead of ~1 MiB of `.rela.dyn`.
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    // The functions a start runs, first and together in `.text`
    // (link/record-startup-order.sh says how the list is made). Only LLD
    // takes the option: the linker of rustc >= 1.90 on x86_64 Linux unless
    // a build names another.
    println!("cargo:rerun-if-changed=link/startup-order.txt");
    println!("cargo:rerun-if-env-changed=PLUGHOST_NO_LINK_ORDER");
    let other_linker = !env("RUSTC_LINKER").is_empty()
        || env("CARGO_ENCODED_RUSTFLAGS").contains("link")
        || !env("PLUGHOST_NO_LINK_ORDER").is_empty();
    if env("TARGET") != "x86_64-unknown-linux-gnu" || other_linker || rustc_minor() < 90 {
        return;
    }
    let order = std::path::Path::new(&env("CARGO_MANIFEST_DIR")).join("link/startup-order.txt");
    if order.is_file() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={},--no-warn-symbol-ordering",
            order.display()
        );
    }
}

/// The minor version of the rustc building this crate (`rustc 1.95.0 (…)`).
fn rustc_minor() -> u32 {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| {
            let text = String::from_utf8(out.stdout).ok()?;
            text.split_whitespace()
                .nth(1)?
                .split('.')
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}
