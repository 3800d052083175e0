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
    println!("cargo:rerun-if-changed=plugins_bundled");
    println!("cargo:rerun-if-changed=python/plughost");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
}
