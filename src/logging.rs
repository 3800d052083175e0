//! Log set-up for the binary: warnings by default, `-v` info, `-vv` debug;
//! `PLUGHOST_LOG` (an `EnvFilter` directive) overrides. Python `logging`
//! records arrive here too (target `python`).

use tracing_subscriber::EnvFilter;

/// Install the stderr subscriber; returns the level for Python's root logger.
pub fn init(verbosity: u8) -> u8 {
    let (directive, python_level) = match verbosity {
        0 => ("warn", 30),
        1 => ("info", 20),
        _ => ("debug", 10),
    };
    let filter = std::env::var("PLUGHOST_LOG")
        .ok()
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::new(directive));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(verbosity > 0)
        .try_init();
    python_level
}
