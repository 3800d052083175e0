//! The `plughost` command; all of it lives in `plughost::cli`.

/// mimalloc for the Rust side of the command (CPython keeps its own object
/// allocator): under `serve`, glibc's malloc and its consolidation of freed
/// buffers took about a sixth of the CPU of a chat request. Only the
/// binary sets it: a Rust service embedding the library keeps its own
/// (the library sets the same one for the wheel, `extension-module`).
#[cfg(not(feature = "extension-module"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    plughost::cli::main()
}
