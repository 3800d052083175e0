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
    println!("cargo:rerun-if-changed=plugins_bundled");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
}
