//! The `plughost` command; all of it lives in `plughost::cli`.
fn main() -> std::process::ExitCode {
    plughost::cli::main()
}
