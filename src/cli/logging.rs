//! Log set-up for the binary: warnings by default, `-v` info, `-vv` debug;
//! `PLUGHOST_LOG` (an `EnvFilter` directive) overrides. Python `logging`
//! records arrive here too (target `python`).
//!
//! Output is for people: colour only when stderr is a terminal and
//! `NO_COLOR` is unset (so pipes and log files get plain text), and the
//! internal `logger=` field of forwarded Python records only from `-v` on.

use std::io::IsTerminal;

use tracing_subscriber::field::Visit;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::EnvFilter;

/// Colour codes belong on a terminal, and only when the user has not asked
/// for none (<https://no-color.org>: any non-empty `NO_COLOR`).
pub fn use_colour(stream_is_terminal: bool) -> bool {
    stream_is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

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
    let show_fields = verbosity > 0;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A log line that cannot be written (stderr a closed pipe) is lost,
        // never fatal: tracing-subscriber would report it with `eprintln!`,
        // which panics on that same stderr, in whatever task was logging.
        .log_internal_errors(false)
        .with_ansi(use_colour(std::io::stderr().is_terminal()))
        .without_time()
        .with_target(verbosity > 0)
        .fmt_fields(Fields { show_fields })
        .try_init();
    python_level
}

/// The message, then (from `-v` on) the other fields as ` name=value`.
struct Fields {
    show_fields: bool,
}

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for Fields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        let mut visitor = FieldWriter {
            writer,
            show_fields: self.show_fields,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct FieldWriter<'w> {
    writer: Writer<'w>,
    show_fields: bool,
    result: std::fmt::Result,
}

impl Visit for FieldWriter<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        self.result = if field.name() == "message" {
            write!(self.writer, "{value}")
        } else if self.show_fields {
            write!(self.writer, " {}={value:?}", field.name())
        } else {
            Ok(())
        };
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        self.result = if field.name() == "message" {
            write!(self.writer, "{value:?}")
        } else if self.show_fields {
            write!(self.writer, " {}={value:?}", field.name())
        } else {
            Ok(())
        };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_colour_off_a_terminal() {
        assert!(!super::use_colour(false));
    }
}
