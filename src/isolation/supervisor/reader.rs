//! Waiting for replies (blocking and abandoned calls), routing them, the
//! reader thread of a worker whose replies no runtime reads
//! ([`super::reactor`]), and a worker's death.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::live::{Live, Waiter};
use super::{Inner, Subject};
use crate::core::outcome::{ExitCause, PluginFault, ResourceLimit};
use crate::isolation::protocol::{read_frame_with, Envelope, Reply, Request};

pub(super) fn wait_blocking(
    live: &Arc<Live>,
    body: Request,
    limit: Duration,
    what: &str,
) -> Result<Reply, PluginFault> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let id = live.send(body, Waiter::Blocking(tx))?;
    match recv_reply(&rx, limit) {
        Ok(r) => r,
        Err(_) => {
            live.forget(id);
            live.kill(Some(format!(
                "{what} ran past {} s",
                crate::core::outcome::seconds_text(limit)
            )));
            Err(PluginFault::TimedOut {
                plugin: live.key.clone(),
                after_ms: limit.as_millis() as u64,
            })
        }
    }
}

/// Block for a reply, at most `limit`. Most replies come within a round
/// trip: it waits that long where it is (another of the runtime's threads
/// reads the reply), and only past [`IN_PLACE`] moves off the runtime
/// ([`off_the_runtime`]), which hands the thread's work to another thread,
/// so a tool's `check_fn` does not pay that on every call. If every
/// runtime thread waits so, each moves off after `IN_PLACE`: late, never
/// stuck.
pub(super) fn recv_reply(
    rx: &std::sync::mpsc::Receiver<Result<Reply, PluginFault>>,
    limit: Duration,
) -> Result<Result<Reply, PluginFault>, std::sync::mpsc::RecvTimeoutError> {
    let first = IN_PLACE.min(limit);
    match rx.recv_timeout(first) {
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) if limit > first => {
            // SAFETY: waiting on a channel touches nothing of Python's.
            unsafe { off_the_runtime(|| rx.recv_timeout(limit - first)) }
        }
        answered => answered,
    }
}

/// How long [`recv_reply`] waits for a reply before moving off the runtime.
const IN_PLACE: Duration = Duration::from_millis(2);

/// Run `wait`, which blocks. On a thread of a multi-thread runtime
/// plughost made (marked by [`crate::runtime::thread_started`]) it runs in
/// `block_in_place`, so that runtime goes on running its other tasks
/// meanwhile: a worker's replies may be read by one of them
/// ([`super::reactor`]), and a runtime whose every thread waited so
/// (for a reply, or for the worker another is starting) would wait for
/// ever. An unmarked thread may be a current-thread runtime's, where
/// `block_in_place` panics; replies are read on a marked runtime only.
/// The GIL, if this thread holds it, is released meanwhile: the reply may
/// need it on its way ([`crate::runtime::threads::gil_released`]).
///
/// # Safety
///
/// As for `gil_released`: `wait` uses no Python reference it captured.
pub(super) unsafe fn off_the_runtime<R>(wait: impl FnOnce() -> R) -> R {
    let multi_thread = || {
        tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
    };
    // SAFETY: `wait` uses no captured Python reference (this function's
    // contract), and neither does the rest of the closure.
    crate::runtime::threads::gil_released(|| {
        if crate::runtime::threads::is_runtime_thread() && multi_thread() {
            tokio::task::block_in_place(wait)
        } else {
            wait()
        }
    })
}

/// Kills the worker if the call is dropped before its reply.
pub(super) struct Abandon<'a> {
    pub(super) live: &'a Arc<Live>,
    pub(super) id: u64,
    pub(super) what: Subject,
    pub(super) armed: bool,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if self.armed {
            tracing::info!(
                "{} of plugin '{}' was abandoned (past its time limit, or its caller went away); it is cancelled in its worker",
                self.what,
                self.live.key
            );
            self.live.cancel(self.id);
        }
    }
}

/// The worker's end of the stream, read after `poll(POLLIN)` says there is
/// something. A thread blocked in a Unix socket's `recv` sits on the
/// socket's one wait queue, which the kernel also wakes whenever the worker
/// reads a request (room to write again): a wake-up for nothing on every
/// call. `poll` is woken only for what it asked for.
struct WaitReadable(UnixStream);

impl Read for WaitReadable {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        let mut fd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `fd` is one valid pollfd for an open descriptor (owned
        // by `self.0`), and the count passed is 1.
        while unsafe { libc::poll(&mut fd, 1, -1) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        // Readable, or ended or broken: the read says which.
        self.0.read(buf)
    }
}

/// The reader thread of one worker: routes replies until the stream ends,
/// then fails the calls in flight with the cause and tells the supervisor.
/// `input` is what was read before (a reactor reader handing over, see
/// [`super::reactor`]), read ahead of the stream.
pub(super) fn read_replies(
    live: Arc<Live>,
    stream: UnixStream,
    input: Vec<u8>,
    supervisor: Weak<Inner>,
) {
    // Buffered: a frame's length and body come in one read.
    let mut reading =
        std::io::BufReader::new(std::io::Cursor::new(input).chain(WaitReadable(stream)));
    let mut buf = Vec::new();
    let ending = loop {
        match read_frame_with::<_, Envelope<Reply>>(&mut reading, &mut buf) {
            Ok(Some(envelope)) => route(&live, envelope),
            Ok(None) => break Ending::Closed,
            // The worker died and the kernel reset its end of the stream:
            // the end of the stream, its exit status says how it ended
            // (`reap`), not a broken protocol.
            // Likewise an end inside a frame (a worker killed while it
            // wrote).
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
                ) =>
            {
                break Ending::Closed
            }
            Err(e) => break Ending::Broken(e),
        }
    };
    let (_, WaitReadable(stream)) = reading.into_inner().into_inner();
    finish(live, stream, ending, supervisor);
}

/// How a worker's stream ended.
pub(super) enum Ending {
    /// Ended (inside a frame too) or reset: the worker exited or was
    /// killed, which its exit status tells.
    Closed,
    /// Not a frame of the protocol.
    Broken(std::io::Error),
}

/// Hand one reply to its waiter (a batch's waiter stays for its next step).
pub(super) fn route(live: &Arc<Live>, envelope: Envelope<Reply>) {
    let Envelope { id, body } = envelope;
    // iso-parity: the worker's plugin calls its host; answered on a thread
    // of the call's own.
    let body = match body {
        Reply::HostCall { call, body } => {
            let answering = Arc::clone(live);
            live.host
                .serve(call, body, move |answer| answering.send_unanswered(answer));
            return;
        }
        other => other,
    };
    if let Reply::Exceeded { limit } = body {
        *live.exceeded.lock().unwrap_or_else(|e| e.into_inner()) = Some(limit);
        return;
    }
    if !matches!(body, Reply::Loaded { .. } | Reply::LoadFailed { .. })
        && !live.answered.load(std::sync::atomic::Ordering::Relaxed)
    {
        live.answered
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let waiter = {
        let mut pending = live.pending.lock().unwrap_or_else(|e| e.into_inner());
        let stream = match pending.waiters.get(&id) {
            Some(Waiter::Stream(tx)) => Some(tx.clone()),
            _ => None,
        };
        match stream {
            Some(tx) => {
                // A batch's step: the waiter stays for the next one.
                let (reply, last) = match body {
                    Reply::Step { reply, last } => (*reply, last),
                    other => (other, true),
                };
                if last {
                    pending.waiters.remove(&id);
                }
                drop(pending);
                let _ = tx.send(Ok((reply, last)));
                return;
            }
            None => pending.waiters.remove(&id),
        }
    };
    if let Some(w) = waiter {
        w.send(Ok(body));
    }
}

/// After the stream ended: stop a worker that broke the protocol, reap it,
/// fail the calls in flight with the cause, and tell the supervisor.
/// Blocking (reaping waits for the exit): on a thread of its own.
pub(super) fn finish(
    live: Arc<Live>,
    mut stream: UnixStream,
    ending: Ending,
    supervisor: Weak<Inner>,
) {
    if let Ending::Broken(e) = ending {
        tracing::warn!(
            "the worker of plugin '{}' broke the protocol ({e}); it is stopped",
            live.key
        );
        live.kill(Some(format!("it broke the protocol: {e}")));
    }
    drain_stream(&mut stream);
    let ended = live.reap();
    let stopped = live
        .stop_reason
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let plugin = live.key.clone();
    let exceeded = live
        .exceeded
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .or_else(|| match (&ended, supervisor.upgrade()) {
            // The kernel ends a process past its CPU limit with SIGXCPU.
            (Ok(ExitCause::Signal { number, .. }), Some(inner)) if *number == libc::SIGXCPU => {
                inner
                    .load
                    .limits
                    .cpu_seconds
                    .map(|seconds| ResourceLimit::CpuTime { seconds })
            }
            _ => None,
        });
    let wedged = *live.wedged.lock().unwrap_or_else(|e| e.into_inner());
    let (fault, crashed) = match (stopped, exceeded, ended) {
        (Some(_), _, _) if wedged.is_some() => (
            PluginFault::Wedged {
                plugin,
                after_ms: wedged.unwrap_or_default(),
            },
            false,
        ),
        (Some(reason), _, _) => (PluginFault::Stopped { plugin, reason }, false),
        (None, Some(limit), _) => (PluginFault::LimitExceeded { plugin, limit }, true),
        (None, None, Ok(cause)) => (PluginFault::Crashed { plugin, cause }, true),
        (None, None, Err(problem)) => (PluginFault::Unavailable { plugin, problem }, true),
    };
    let waiters: Vec<Waiter> = {
        let mut pending = live.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.ended = Some(fault.clone());
        pending.waiters.drain().map(|(_, w)| w).collect()
    };
    // The supervisor learns of the death before the callers do, so a
    // caller's next call already starts a new worker.
    if let Some(inner) = supervisor.upgrade() {
        note_death(&inner, &live, crashed);
    }
    if crashed {
        tracing::warn!("{fault}; its calls in flight fail, and it restarts for the next call");
    }
    for w in waiters {
        w.send(Err(fault.clone()));
    }
}

/// Forget a dead worker and count its crash towards the breaker.
pub(super) fn note_death(inner: &Inner, live: &Arc<Live>, crashed: bool) {
    let mut state = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    if state.live.as_ref().is_some_and(|l| Arc::ptr_eq(l, live)) {
        state.live = None;
    }
    if crashed {
        // A worker that crashed before answering anything: the plugin may
        // be crashing in a loop (see `backoff`).
        if live.answered.load(std::sync::atomic::Ordering::Relaxed) {
            state.looping = 0;
        } else {
            state.looping += 1;
        }
        let now = Instant::now();
        let window = inner.settings.breaker_window;
        state.total_crashes += 1;
        state.crashes.push_back(now);
        while state
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            state.crashes.pop_front();
        }
        let count = state.crashes.len() as u32;
        if count >= inner.settings.breaker_crashes && state.disabled.is_none() {
            let fault = PluginFault::Disabled {
                plugin: inner.load.key.clone(),
                crashes: count,
                window_seconds: window.as_secs(),
            };
            tracing::error!("{fault}");
            state.disabled = Some(fault);
        }
    }
}

/// Read what is left so a worker blocked writing can finish dying.
pub(super) fn drain_stream(stream: &mut UnixStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = [0u8; 4096];
    while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
}
