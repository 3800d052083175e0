//! `_plughost_native.ToolCallLog`: an append-only JSON-lines log of
//! finished tool calls, written by a Rust thread (issue 26, item 2).
//!
//! The bundled `tool-audit` plugin registers one as its `post_tool_call`
//! hook when it runs under plughost. A Flowly host calls a hook through
//! Python; this one the host recognises ([`ToolCallLog::handle`]) and calls
//! natively: a call costs a queue push, with no Python entered, no GIL and
//! no I/O on the tool-call path. A writer thread appends what is queued at
//! most [`FLUSH_INTERVAL`] later, through one handle (reopened when the file
//! was removed or replaced meanwhile). It is still an ordinary callable
//! (`log(ctx)`), so any path that calls it through Python records alike.
//!
//! What is on disk, when:
//! * **clean exit**: every queued record. The log is written out when its
//!   last holder goes (the host dropping its hooks, the plugin's callables
//!   going) and by `close()` (tool-audit calls it from `atexit`);
//! * **SIGKILL, a crash, `os._exit`**: the records of the last
//!   [`FLUSH_INTERVAL`] at most; what was written before is in the file
//!   (the kernel has it; an OS crash or power loss can lose what it had not
//!   written to the disk yet).
//!
//! A line is what tool-audit always wrote, `json.dumps(record,
//! sort_keys=True)` of `ts`, `tool`, `session_id`, `duration_ms` and
//! `success`, with `ts` and `duration_ms` rounded to 3 decimals as Python's
//! `round` does, floats as Python's `repr` writes them and strings escaped
//! to ASCII as `json` does.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;

use crate::core::hooks::ToolCallContext;

/// How long a record may wait in memory before the writer appends it.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// One finished call.
struct Record {
    ts: f64,
    tool: Arc<str>,
    session_id: Arc<str>,
    duration_ms: f64,
    success: bool,
}

#[derive(Default)]
struct Queue {
    records: Vec<Record>,
    /// The vector the writer last emptied, handed back for the next burst:
    /// the queue keeps its capacity instead of growing (and faulting in
    /// pages) anew every [`FLUSH_INTERVAL`].
    spare: Vec<Record>,
    /// The last tool name and session id recorded, shared by the records
    /// that repeat them (most do: one session calls a few tools), so a
    /// record allocates nothing in the common case.
    last_tool: Option<Arc<str>>,
    last_session: Option<Arc<str>>,
    /// The writer was woken for what is queued.
    armed: bool,
    closed: bool,
    writer_started: bool,
}

/// The open file and which file it is (device, inode).
struct Open {
    file: File,
    id: (u64, u64),
}

struct Shared {
    path: PathBuf,
    /// Tools whose calls are not recorded (the log's own reading tool).
    skip: Vec<String>,
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Held while writing: one writer at a time, in queue order.
    file: Mutex<Option<Open>>,
}

/// What the host holds of a [`ToolCallLog`] to record natively; the log is
/// written out when the last handle (or the Python object) goes.
#[derive(Clone)]
pub struct LogHandle(Arc<Owner>);

/// Closes the log when the last holder drops it.
struct Owner(Arc<Shared>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// `text` as a shared string: `last` itself when it holds the same text,
/// else a new one, which becomes `last`.
fn shared_text(last: &mut Option<Arc<str>>, text: &str) -> Arc<str> {
    match last {
        Some(seen) if &**seen == text => seen.clone(),
        _ => last.insert(Arc::from(text)).clone(),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LogHandle {
    /// Queue the finished call of `ctx` (the `post_tool_call` context).
    pub fn record(&self, ctx: &ToolCallContext) {
        self.0 .0.push(
            &ctx.tool_name,
            &ctx.session_id,
            ctx.duration_ms,
            ctx.success.unwrap_or(false),
        );
    }
}

impl Shared {
    fn push(self: &Arc<Self>, tool: &str, session_id: &str, duration_ms: f64, success: bool) {
        if self.skip.iter().any(|s| s == tool) {
            return;
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let mut q = lock(&self.queue);
        let tool = shared_text(&mut q.last_tool, tool);
        let session_id = shared_text(&mut q.last_session, session_id);
        q.records.push(Record {
            ts,
            tool,
            session_id,
            duration_ms,
            success,
        });
        if q.closed {
            // Written out already (closed at exit): no writer any more.
            drop(q);
            self.flush();
            return;
        }
        if !q.writer_started {
            q.writer_started = true;
            let shared = self.clone();
            let started = std::thread::Builder::new()
                .name("plughost call log".into())
                .spawn(move || shared.run());
            if let Err(e) = started {
                tracing::warn!(
                    "no writer thread for {} ({e}); writing on flush",
                    self.path.display()
                );
            }
        }
        if !q.armed {
            q.armed = true;
            self.wake.notify_one();
        }
    }

    /// The writer: woken by the first record of a burst, it waits
    /// [`FLUSH_INTERVAL`] to gather the rest and writes them in one go.
    fn run(self: Arc<Self>) {
        loop {
            let mut q = lock(&self.queue);
            while !q.armed && !q.closed {
                q = self.wake.wait(q).unwrap_or_else(|p| p.into_inner());
            }
            if q.closed {
                return;
            }
            drop(q);
            std::thread::sleep(FLUSH_INTERVAL);
            lock(&self.queue).armed = false;
            self.flush();
        }
    }

    /// Append everything queued to the file.
    fn flush(&self) {
        let mut file = lock(&self.file);
        let mut records = {
            let mut q = lock(&self.queue);
            let spare = std::mem::take(&mut q.spare);
            std::mem::replace(&mut q.records, spare)
        };
        if records.is_empty() {
            return;
        }
        let mut text = String::with_capacity(records.len() * 110);
        for r in &records {
            encode(&mut text, r);
            text.push('\n');
        }
        let written = self
            .open(&mut file)
            .and_then(|f| f.file.write_all(text.as_bytes()));
        if let Err(e) = written {
            *file = None;
            tracing::warn!(
                "could not write {} call record(s) to {}: {e}",
                records.len(),
                self.path.display()
            );
        }
        records.clear();
        lock(&self.queue).spare = records;
    }

    /// The handle, (re)opened when the file is not the one it has open.
    fn open<'a>(&self, slot: &'a mut Option<Open>) -> std::io::Result<&'a mut Open> {
        let on_disk = std::fs::metadata(&self.path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        if slot.as_ref().is_some_and(|o| Some(o.id) != on_disk) {
            *slot = None;
        }
        if slot.is_none() {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            let m = file.metadata()?;
            *slot = Some(Open {
                file,
                id: (m.dev(), m.ino()),
            });
        }
        Ok(slot.as_mut().expect("opened above"))
    }

    fn close(&self) {
        lock(&self.queue).closed = true;
        self.wake.notify_all();
        self.flush();
    }
}

/// A JSON-lines log of finished tool calls (see the module doc).
///
/// `ToolCallLog(path, skip=())`: records go to `path`; calls of the tools
/// named in `skip` are not recorded.
#[pyclass(module = "_plughost_native", frozen, weakref)]
pub struct ToolCallLog {
    handle: LogHandle,
}

impl ToolCallLog {
    /// What the host records through (see [`LogHandle::record`]).
    pub fn handle(&self) -> LogHandle {
        self.handle.clone()
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.handle.0 .0
    }
}

#[pymethods]
impl ToolCallLog {
    #[new]
    #[pyo3(signature = (path, skip = Vec::new()))]
    fn new(path: PathBuf, skip: Vec<String>) -> ToolCallLog {
        let shared = Arc::new(Shared {
            path,
            skip,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            file: Mutex::new(None),
        });
        ToolCallLog {
            handle: LogHandle(Arc::new(Owner(shared))),
        }
    }

    /// As a Flowly `post_tool_call` hook called through Python.
    fn __call__(&self, ctx: &Bound<'_, PyAny>) -> PyResult<()> {
        let tool: String = ctx.getattr("tool_name")?.extract()?;
        let session: String = ctx.getattr("session_id")?.extract()?;
        let duration: Option<f64> = ctx.getattr("duration_ms")?.extract()?;
        let success: bool = ctx.getattr("success")?.is_truthy()?;
        self.record(&tool, &session, duration.unwrap_or(0.0), success);
        Ok(())
    }

    /// Queue one finished call.
    fn record(&self, tool: &str, session_id: &str, duration_ms: f64, success: bool) {
        self.shared().push(tool, session_id, duration_ms, success);
    }

    /// Write out what is queued (a reader calls it first, so it sees every
    /// call before it).
    fn flush(&self, py: Python<'_>) {
        py.detach(|| self.shared().flush());
    }

    /// Write out what is queued and stop the writer; later records are
    /// written as they come.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.shared().close());
    }

    /// The file the records go to.
    #[getter]
    fn path(&self) -> PathBuf {
        self.shared().path.clone()
    }
}

/// One record as `json.dumps(record, sort_keys=True)` writes it.
fn encode(out: &mut String, r: &Record) {
    out.push_str("{\"duration_ms\": ");
    py_float(out, round3(r.duration_ms));
    out.push_str(", \"session_id\": ");
    ascii_string(out, &r.session_id);
    out.push_str(", \"success\": ");
    out.push_str(if r.success { "true" } else { "false" });
    out.push_str(", \"tool\": ");
    ascii_string(out, &r.tool);
    out.push_str(", \"ts\": ");
    py_float(out, round3(r.ts));
    out.push('}');
}

/// Python's `round(x, 3)`: the exact value rounded half to even (what
/// Rust's `{:.3}` does), read back.
fn round3(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    // Usually without formatting: the product is within half an ulp of the
    // exact x·1000, so unless it lies that close to a half, it rounds to
    // the same integer as the exact value, and the division is then the
    // double nearest that decimal, as the read-back gives.
    let scaled = x * 1000.0;
    if scaled.abs() < 4.5e15 {
        let floor = scaled.floor();
        let from_half = (scaled - floor - 0.5).abs();
        if from_half > scaled.abs() * f64::EPSILON {
            let nearest = if scaled - floor < 0.5 {
                floor
            } else {
                floor + 1.0
            };
            // A negative value that rounds to zero is -0.0, as in Python.
            return (nearest / 1000.0).copysign(x);
        }
    }
    format!("{x:.3}").parse().unwrap_or(x)
}

/// A float as Python's `json` writes it: `repr` (shortest round trip), and
/// `NaN` / `Infinity` / `-Infinity`.
fn py_float(out: &mut String, x: f64) {
    if x.is_nan() {
        return out.push_str("NaN");
    }
    if x.is_infinite() {
        return out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
    }
    // serde_json writes the shortest round trip (ryu): "1.0", "0.001",
    // "1e16" or "1e+16". Python's repr agrees except that its exponent has a sign and
    // two digits at least ("1e+16"); a value below 1e-4 (written
    // differently) cannot be the result of round3 except 0.0.
    let text = serde_json::to_string(&x).unwrap_or_else(|_| "0.0".into());
    match text.split_once('e') {
        None => out.push_str(&text),
        Some((mantissa, exp)) => {
            // serde_json may or may not write the '+' itself.
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp.strip_prefix('+').unwrap_or(exp)),
            };
            out.push_str(mantissa);
            out.push('e');
            out.push(sign);
            if digits.len() < 2 {
                out.push('0');
            }
            out.push_str(digits);
        }
    }
}

/// A string as `json.encoder.encode_basestring_ascii` writes it.
fn ascii_string(out: &mut String, s: &str) {
    use std::fmt::Write as _;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quick rounding gives what formatting to three places and
    /// reading back gives (Python's `round(x, 3)`), ties and timestamps too.
    #[test]
    fn round3_is_pythons_round_to_three_places() {
        let mut x: f64 = 1_764_770_000.123_456;
        let mut checked = 0;
        for i in 0..200_000u64 {
            let samples = [
                x,
                (i as f64) * 0.000_5,
                (i as f64) / 7.0,
                -(i as f64) * 0.001_25,
                (i as f64) * 1e-7,
                -(i as f64) * 1e-7,
            ];
            for v in samples {
                let slow: f64 = format!("{v:.3}").parse().unwrap();
                assert_eq!(round3(v).to_bits(), slow.to_bits(), "{v:e}");
                checked += 1;
            }
            x += 0.000_137;
        }
        assert_eq!(checked, 1_200_000);
    }

    fn line(ts: f64, tool: &str, session: &str, duration: f64, success: bool) -> String {
        let mut out = String::new();
        let r = Record {
            ts,
            tool: tool.into(),
            session_id: session.into(),
            duration_ms: duration,
            success,
        };
        encode(&mut out, &r);
        out
    }

    #[test]
    fn lines_are_what_json_dumps_wrote() {
        // Expected texts from CPython: json.dumps({...}, sort_keys=True)
        // with round(x, 3) of ts and duration_ms.
        assert_eq!(
            line(1733000000.0625, "exec", "s1", 0.0625, true),
            r#"{"duration_ms": 0.062, "session_id": "s1", "success": true, "tool": "exec", "ts": 1733000000.062}"#
        );
        assert_eq!(
            line(1.0, "t\"\\\n", "é😀\u{7f}", 1e17, false),
            r#"{"duration_ms": 1e+17, "session_id": "\u00e9\ud83d\ude00\u007f", "success": false, "tool": "t\"\\\n", "ts": 1.0}"#
        );
        assert_eq!(
            line(0.0004, "x", "", f64::NAN, false),
            r#"{"duration_ms": NaN, "session_id": "", "success": false, "tool": "x", "ts": 0.0}"#
        );
    }
}
