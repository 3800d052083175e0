//! The tests that need a process of their own: each test here re-runs
//! this binary for itself alone (`alone!`), because it asserts on or
//! changes what a whole process shares — whether CPython was started at
//! all, the first interpreter start and its log subscriber, the
//! environment's `HERMES_HOME`, the runtime named to read isolated
//! plugins' replies, Flowly's process-wide web provider registry. The
//! rest of the integration tests share one process in `tests/suite`.

#[path = "../suite/common/mod.rs"]
mod common;

mod discovery_overlap;
mod event_reference;
mod isolation_reactor;
mod native_only;
mod web_backends_lazy;
mod web_providers_again;
mod web_tools;

/// Runs the calling test alone in a fresh process of this binary: in the
/// parent it returns after checking that the child ran exactly that test
/// and passed (the child's output is shown when it did not); in the child
/// it does nothing and the test goes on.
macro_rules! alone {
    ($test:ident) => {
        if !$crate::in_own_process(module_path!(), stringify!($test)) {
            return;
        }
    };
}
pub(crate) use alone;

/// `alone!`'s work: true in the child that is to run `module::test`.
pub fn in_own_process(module: &str, test: &str) -> bool {
    const CHILD: &str = "PLUGHOST_TEST_ALONE";
    // The harness names a test without the crate: `native_only::x`.
    let module = module.split_once("::").map_or(module, |(_, rest)| rest);
    let name = format!("{module}::{test}");
    if std::env::var(CHILD).as_deref() == Ok(name.as_str()) {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, &name)
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} in a process of its own failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    false
}
