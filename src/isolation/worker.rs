//! The worker process: loads one plugin through its dialect, exactly as
//! plughost does in-process, and serves requests on the protocol stream.
//!
//! The stream is the worker's original stdin/stdout (a socket plughost
//! made). Before anything else runs they are moved to private descriptors,
//! fd 0 becomes `/dev/null` and fd 1 becomes stderr, so a plugin's
//! `print()` or `input()` can never touch the protocol.
//!
//! Requests are served where they are read: the thread that reads one runs
//! a sync handler itself and writes its reply, while the other serving
//! threads wait for the next (`worker_input`: one is woken per
//! request, so a slow call never holds up the next). No request changes
//! threads on its way, which is most of what an isolated call costs; an
//! async handler's future runs on the runtime's tokio threads.
//!
//! What the worker serves, and the answer to each request, is
//! `worker_plugin`.

use std::fs::File;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::protocol::{encode_frame, read_frame, Envelope, HookErrorWire, Reply, Request};
use super::worker_input::{Input, Waiter};
use super::worker_plugin::{answer, load, Answer, Served};
use crate::core::outcome::{PluginError, ResourceLimit};
use crate::plugins::config::ResourceLimits;

/// Run as a worker: serve until plughost closes the stream, then exit.
/// Never returns.
pub fn main() -> ! {
    ignore_terminal_interrupt();
    let (input, output) = match take_protocol_fds() {
        Ok(fds) => fds,
        Err(e) => {
            eprintln!("plughost worker: cannot take the protocol stream: {e}");
            std::process::exit(70);
        }
    };
    serve(File::from(input), File::from(output))
}

/// A Ctrl-C at the terminal goes to the whole process group, the workers
/// included; plughost owns it (it cancels the turn, or shuts `serve` down
/// with a grace period) and stops its workers itself, and a worker ends
/// when its protocol stream closes. So a worker catches SIGINT with a
/// handler that does nothing: a call in flight is never killed by the key
/// meant for plughost, and its Python, finding a handler already set,
/// installs no `KeyboardInterrupt` one. A handler, not `SIG_IGN`: an
/// ignored signal stays ignored across `exec`, so the subprocesses a
/// plugin starts could not be interrupted; a caught one is reset to the
/// default in them.
fn ignore_terminal_interrupt() {
    extern "C" fn nothing(_: libc::c_int) {}
    // SAFETY: `action` is zero-initialised (a valid `sigaction`: no flags,
    // an empty mask) before its fields are set; the handler does nothing,
    // so it is async-signal-safe and touches no state; SA_RESTART keeps
    // blocking reads from failing with EINTR. Replacing a handler Python
    // installed (a worker started from the wheel's own interpreter) only
    // means Python no longer sees SIGINT.
    let failed = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = nothing as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut()) != 0
    };
    if failed {
        eprintln!(
            "plughost worker: cannot take SIGINT over ({}); a terminal Ctrl-C may stop this worker",
            std::io::Error::last_os_error()
        );
    }
}

/// Move fds 0 and 1 out of a plugin's reach (see the module docs).
fn take_protocol_fds() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let dup = |fd: i32| -> std::io::Result<OwnedFd> {
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) on a descriptor number only
        // creates a new descriptor; no memory is passed.
        let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if new < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `new` was just returned by fcntl, is open, and is owned
        // by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(new) })
    };
    let input = dup(0)?;
    let output = dup(1)?;
    let null = File::open("/dev/null")?;
    let redirect = |from: i32, to: i32| -> std::io::Result<()> {
        // SAFETY: dup2 between two open descriptor numbers; no memory is
        // passed, and fds 0/1 are not owned by any Rust object here.
        if unsafe { libc::dup2(from, to) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    use std::os::fd::AsRawFd;
    redirect(null.as_raw_fd(), 0)?;
    redirect(2, 1)?;
    Ok((input, output))
}

/// End the process at once: the stream is gone (plughost exited or closed
/// it), so nothing can be answered any more. `_exit` also ends a process
/// whose plugin spins holding the GIL.
fn end(code: i32) -> ! {
    // SAFETY: _exit only ends the process; no Rust state is used after.
    unsafe { libc::_exit(code) }
}

/// Serving threads kept ready to read the next request beyond those
/// running one; more than [`MAX_IDLE`] idle ones end.
const MAX_IDLE: usize = 4;

/// What every serving thread shares.
struct Shared {
    /// The request stream; the thread that takes a request runs it.
    input: Input,
    /// The reply stream; each reply is written whole, by the thread that
    /// produced it (shared with the host-call channel).
    output: Arc<Mutex<File>>,
    served: Served,
    limits: ResourceLimits,
    /// Threads not running a request (reading, or waiting to read).
    idle: AtomicUsize,
    /// The calls running, which plughost may cancel one by one.
    calls: super::worker_calls::Calls,
}

fn serve(mut input: File, output: File) -> ! {
    let first: Option<Envelope<Request>> = read_frame(&mut input).unwrap_or(None);
    let Some(Envelope {
        id,
        body:
            Request::Load {
                key,
                dir,
                home,
                dialect,
                python_log_level,
                limits,
                sandbox,
            },
    }) = first
    else {
        eprintln!("plughost worker: the first request must be Load");
        end(70)
    };
    // --- iso-parity: the plugin's calls into its host (issue 47) ---
    let output = Arc::new(Mutex::new(output));
    let channel = super::host_link::worker_side::install(output.clone(), &input);
    if let Some(watch) = sandbox {
        // (issue 50) before the plugin's first line runs
        super::sandbox::denials::install(watch);
    }
    let (served, reply) = match super::limits::apply(&limits) {
        Ok(()) => load(&key, &dir, &home, &dialect, python_log_level, channel),
        Err(problem) => (
            None,
            Reply::LoadFailed {
                error: PluginError::native(problem),
            },
        ),
    };
    super::host_link::worker_side::loaded();
    let input = match Input::new(OwnedFd::from(input)) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("plughost worker: cannot wait for requests: {e}");
            end(70)
        }
    };
    let shared = Arc::new(Shared {
        input,
        output: output.clone(),
        served: served.unwrap_or_default(),
        limits,
        idle: AtomicUsize::new(2),
        calls: Default::default(),
    });
    let loaded = matches!(reply, Reply::Loaded { .. });
    shared.reply(id, reply, &mut Vec::new());
    if !loaded {
        // Nothing to serve; the failure is sent.
        let _ = output.lock().unwrap_or_else(|e| e.into_inner()).flush();
        end(0)
    }
    drop(output);
    spawn_server(&shared);
    serve_requests(&shared);
    // Enough threads serve: this one waits for the stream to end.
    loop {
        std::thread::park();
    }
}

fn spawn_server(shared: &Arc<Shared>) {
    let shared = shared.clone();
    let started = std::thread::Builder::new()
        .name("plughost-serve".into())
        .spawn(move || serve_requests(&shared));
    if let Err(e) = started {
        tracing::warn!("cannot start another serving thread ({e}); requests wait their turn");
    }
}

/// Read requests and run each on this thread, until the stream ends (then
/// the process ends) or enough other threads are idle.
fn serve_requests(shared: &Arc<Shared>) {
    crate::runtime::thread_started();
    let waiter = match Waiter::new(&shared.input) {
        Ok(waiter) => waiter,
        Err(e) => {
            tracing::warn!("a serving thread cannot wait for requests ({e}); it ends");
            shared.idle.fetch_sub(1, Ordering::AcqRel);
            return;
        }
    };
    let mut write_buf = Vec::new();
    loop {
        let Envelope { id, body } = match shared.input.next() {
            Ok(Some(envelope)) => envelope,
            Ok(None) => {
                waiter.wait();
                continue;
            }
            // plughost closed the stream (or it broke): the plugin's
            // teardown runs (iso-parity: `on_unload` at the worker's stop),
            // then nothing more to do.
            Err(_) => {
                super::worker_plugin::unload(&shared.served);
                end(0)
            }
        };
        if shared.idle.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Nobody is left to read the next request while this one runs.
            shared.idle.fetch_add(1, Ordering::AcqRel);
            spawn_server(shared);
        }
        if let Some(seconds) = shared.limits.cpu_seconds {
            if let Err(problem) = super::limits::rearm_cpu(seconds) {
                tracing::warn!("{problem}");
            }
        }
        serve_one(shared, id, body, &mut write_buf);
        if shared.idle.fetch_add(1, Ordering::AcqRel) >= MAX_IDLE {
            shared.idle.fetch_sub(1, Ordering::AcqRel);
            return;
        }
    }
}

/// Serve request `id` on this thread (an async handler on the runtime),
/// unless plughost cancelled it; a cancel is answered here.
fn serve_one(shared: &Arc<Shared>, id: u64, body: Request, write_buf: &mut Vec<u8>) {
    if let Request::Cancel { call } = body {
        let running = shared.calls.cancel(call);
        // The answer says the interpreter is still responsive: a worker
        // whose GIL a plugin holds for good cannot take it, and plughost
        // replaces it past its bound.
        let _ = crate::runtime::try_attach(|_| ());
        return shared.reply(id, Reply::Cancelled { running }, write_buf);
    }
    // Unanswered requests (id 0) cannot be cancelled.
    let token = match id {
        0 => None,
        _ => match shared.calls.begin(id) {
            Some(token) => Some(token),
            None => return,
        },
    };
    let cancelled = || token.as_ref().is_some_and(|t| t.is_cancelled());
    match answer(&shared.served, body) {
        Answer::Batch { tool, call, steps } => {
            let served = &shared.served;
            let runtime = served.runtime_tool(&tool);
            let found = served.tools.get(&tool).or(runtime.as_ref());
            let mut send = |reply, last| {
                if cancelled() {
                    return;
                }
                let step = Reply::Step {
                    reply: Box::new(reply),
                    last,
                };
                shared.reply(id, step, write_buf);
            };
            super::worker_batch::run(
                found,
                &served.hooks,
                call,
                &steps,
                token.as_deref(),
                &mut send,
            );
        }
        // A sync handler ran here; cancelled meanwhile, its answer is dropped.
        Answer::Streamed(start) => {
            let Some(rt) = crate::runtime::Runtime::get() else {
                end(70)
            };
            let replying = shared.clone();
            let send: super::worker_routes::Replies = Arc::new(move |reply, last| {
                let step = Reply::Step {
                    reply: Box::new(reply),
                    last,
                };
                replying.reply(id, step, &mut Vec::new());
            });
            let answering = start(id, send);
            let task_shared = shared.clone();
            let task = rt.tokio().spawn(async move {
                answering.await;
                task_shared.calls.end(id);
            });
            if let Some(token) = &token {
                token.set_task(task.abort_handle());
            }
            return;
        }
        Answer::Now(reply) if !cancelled() => shared.reply(id, reply, write_buf),
        Answer::Now(_) | Answer::Silent => {}
        Answer::Later(fut) => {
            let Some(rt) = crate::runtime::Runtime::get() else {
                end(70)
            };
            let task_shared = shared.clone();
            let task = rt.tokio().spawn(async move {
                let reply = fut.await;
                // Not aborted, so not cancelled before it answered.
                task_shared.calls.end(id);
                task_shared.reply(id, reply, &mut Vec::new());
            });
            if let Some(token) = &token {
                token.set_task(task.abort_handle());
            }
            return;
        }
    }
    if id != 0 {
        shared.calls.end(id);
    }
}

impl Shared {
    /// Send the reply to request `id` (encoded in `buf`), unless it shows
    /// the memory limit was hit: then say so and end (the worker's state
    /// is suspect).
    fn reply(&self, id: u64, reply: Reply, buf: &mut Vec<u8>) {
        if let (Some(mib), Some(error)) = (self.limits.memory_mb, failure_of(&reply)) {
            if super::limits::is_out_of_memory(error) {
                let notice = Reply::Exceeded {
                    limit: ResourceLimit::Memory { mib },
                };
                if encode_frame(
                    buf,
                    &Envelope {
                        id: 0,
                        body: notice,
                    },
                )
                .is_ok()
                {
                    self.write(buf);
                }
                end(1)
            }
        }
        if let Err(e) = encode_frame(buf, &Envelope { id, body: reply }) {
            let refusal = Reply::Refused {
                problem: format!("its answer cannot be sent: {e}"),
            };
            if encode_frame(buf, &Envelope { id, body: refusal }).is_err() {
                end(70)
            }
        }
        self.write(buf);
    }

    /// Write the frames in `out` in one go, and empty it.
    fn write(&self, out: &mut Vec<u8>) {
        if out.is_empty() {
            return;
        }
        let mut output = self.output.lock().unwrap_or_else(|e| e.into_inner());
        if output.write_all(out).is_err() {
            end(0)
        }
        out.clear();
    }
}

/// The plugin failure a reply carries, if any.
fn failure_of(reply: &Reply) -> Option<&PluginError> {
    match reply {
        Reply::Tool { result: Err(e) }
        | Reply::ToolFailed { error: e, .. }
        | Reply::Command { result: Err(e) }
        | Reply::Checked {
            result: Some(Err(e)),
        }
        | Reply::LoadFailed { error: e }
        | Reply::Hook {
            answer: Err(HookErrorWire::Raised(e)),
            ..
        } => Some(e),
        Reply::Step { reply, .. } => failure_of(reply),
        _ => None,
    }
}
