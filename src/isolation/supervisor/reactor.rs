//! Where a worker's replies are read: on the reactor of the runtime the
//! process named ([`read_replies_on`]: the CLI's one runtime), else on a
//! thread of its own.
//!
//! With a reader thread every reply wakes that thread, which then wakes
//! the runtime worker awaiting the reply: two thread switches a call. Read
//! on the reactor, the reply wakes the runtime worker parked on it, which
//! routes the reply and goes on with the awaiting task at once. Only a
//! multi-thread runtime whose threads plughost marked qualifies: a
//! blocking wait for a reply on one of its threads moves off the runtime
//! (`block_in_place`, see [`super::reader::recv_reply`]), so a thread is
//! always left to read the reply.
//!
//! A runtime may end before the worker does (a command's runtime shut down
//! while its host lives on): the reading then moves to a thread, with what
//! was read so far, so no reply and no death goes unnoticed.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Weak};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::live::Live;
use super::reader::{self, route, Ending};
use super::Inner;
use crate::isolation::protocol::{take_frame, Envelope, Reply};

/// How much room for replies a worker's reading keeps between them.
const KEPT_ROOM: usize = 1 << 20;

/// Start reading `stream`, the replies of `live`'s worker.
pub(super) fn read_replies(
    live: Arc<Live>,
    stream: UnixStream,
    supervisor: Weak<Inner>,
) -> std::io::Result<()> {
    let runtime = REPLIES_RUNTIME
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    match runtime {
        Some(runtime) => {
            let reading = Reading {
                registered: None,
                stream: Some(stream),
                input: Vec::new(),
                live,
                supervisor,
            };
            // A runtime shutting down drops the task at once: `Reading`'s
            // drop hands the stream to a thread.
            drop(runtime.spawn(on_reactor(reading)));
            Ok(())
        }
        None => on_thread(live, stream, Vec::new(), supervisor),
    }
}

/// The runtime whose reactor reads the workers' replies ([`read_replies_on`]).
static REPLIES_RUNTIME: std::sync::RwLock<Option<tokio::runtime::Handle>> =
    std::sync::RwLock::new(None);

/// Read the replies of the workers started from now on on `runtime`'s
/// reactor instead of a thread each, until the guard returned is dropped
/// (before the runtime ends: workers started later get a thread again).
/// `runtime` must be a multi-thread one whose threads are marked by
/// [`crate::runtime::thread_started`] (`Builder::on_thread_start`), as the
/// CLI's is; on another, each worker still gets a thread.
#[must_use = "the runtime reads replies until the guard is dropped"]
pub fn read_replies_on(runtime: tokio::runtime::Handle) -> RepliesRuntime {
    let named = runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread;
    if named {
        *REPLIES_RUNTIME.write().unwrap_or_else(|e| e.into_inner()) = Some(runtime);
    }
    RepliesRuntime { named }
}

/// While it lives, workers' replies are read on the runtime named by
/// [`read_replies_on`].
pub struct RepliesRuntime {
    named: bool,
}

impl Drop for RepliesRuntime {
    fn drop(&mut self) {
        if self.named {
            *REPLIES_RUNTIME.write().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

fn on_thread(
    live: Arc<Live>,
    stream: UnixStream,
    input: Vec<u8>,
    supervisor: Weak<Inner>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("plughost-isolated-{}", live.key))
        .spawn(move || reader::read_replies(live, stream, input, supervisor))
        .map(|_| ())
}

/// A worker's stream as the reactor reads it.
struct Reading {
    /// The stream's registration with the reactor; declared first, so it
    /// is dropped (deregistered) before the stream's descriptor closes.
    registered: Option<AsyncFd<RawFd>>,
    /// `None` once handed on (to [`reader::finish`] or a thread).
    stream: Option<UnixStream>,
    /// Bytes read and not yet a whole frame.
    input: Vec<u8>,
    live: Arc<Live>,
    supervisor: Weak<Inner>,
}

impl Drop for Reading {
    fn drop(&mut self) {
        drop(self.registered.take());
        // The runtime dropped the task before the stream ended: a thread
        // reads on from where the reactor stopped.
        if let Some(stream) = self.stream.take() {
            let parts = (
                self.live.clone(),
                stream,
                std::mem::take(&mut self.input),
                self.supervisor.clone(),
            );
            on_a_thread(
                format!("plughost-isolated-{}", self.live.key),
                parts,
                |(live, stream, input, supervisor)| {
                    reader::read_replies(live, stream, input, supervisor)
                },
                |(live, stream, _, supervisor), e| {
                    // Nobody could read its replies: stop it, and fail its
                    // calls in flight with why (none may wait for ever).
                    tracing::warn!(
                        "the worker of plugin '{}' is stopped: its runtime ended and no thread can read its replies ({e})",
                        live.key
                    );
                    live.kill(Some(format!("no thread can read its replies: {e}")));
                    reader::finish(live, stream, Ending::Closed, supervisor);
                },
            );
        }
    }
}

/// Run `work(parts)` on a new thread named `name`; when no thread can be
/// started, `here(parts, why)` runs on the calling one instead, so the
/// parts are never lost with the thread that did not start.
fn on_a_thread<T: Send + 'static>(
    name: String,
    parts: T,
    work: fn(T),
    here: impl FnOnce(T, std::io::Error),
) {
    let slot = Arc::new(std::sync::Mutex::new(Some(parts)));
    let take =
        |slot: &std::sync::Mutex<Option<T>>| slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    let theirs = slot.clone();
    let started = std::thread::Builder::new().name(name).spawn(move || {
        if let Some(parts) = take(&theirs) {
            work(parts);
        }
    });
    // Only when the thread did not start: a started one takes the parts.
    if let Err(e) = started {
        if let Some(parts) = take(&slot) {
            here(parts, e);
        }
    }
}

async fn on_reactor(mut reading: Reading) {
    // A runtime whose threads plughost did not mark cannot move a blocking
    // wait off itself (`reader::off_the_runtime`): a thread reads then
    // (`Reading`'s drop).
    if !crate::runtime::threads::is_runtime_thread() {
        return;
    }
    let Some(fd) = reading.stream.as_ref().map(|s| s.as_raw_fd()) else {
        return;
    };
    // A runtime built without I/O has no reactor, and registering panics:
    // a thread reads then (`Reading`'s drop).
    let registered = std::panic::catch_unwind(|| {
        // SAFETY: `fd` is the descriptor of the stream `reading` owns; it
        // stays open for as long as the registration lives (dropped first,
        // see `Reading`), and an `i32` always gives that same descriptor.
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
    });
    let ending = match registered {
        Ok(Ok(registered)) => {
            reading.registered = Some(registered);
            read_until_the_end(&mut reading).await
        }
        _ => return,
    };
    drop(reading.registered.take());
    let Some(stream) = reading.stream.take() else {
        return;
    };
    // Reaping waits for the exit: on a thread, not the runtime's worker.
    let parts = (
        reading.live.clone(),
        stream,
        ending,
        reading.supervisor.clone(),
    );
    on_a_thread(
        format!("plughost-reap-{}", reading.live.key),
        parts,
        |(live, stream, ending, supervisor)| reader::finish(live, stream, ending, supervisor),
        // No thread to spare: finish here (the runtime goes on meanwhile).
        |(live, stream, ending, supervisor), _| {
            tokio::task::block_in_place(|| reader::finish(live, stream, ending, supervisor))
        },
    );
}

/// Route whole frames as they come until the stream ends.
async fn read_until_the_end(reading: &mut Reading) -> Ending {
    loop {
        let mut taken = 0;
        loop {
            match take_frame::<Envelope<Reply>>(&reading.input[taken..]) {
                Ok(Some((envelope, took))) => {
                    taken += took;
                    route(&reading.live, envelope);
                }
                Ok(None) => break,
                Err(e) => return Ending::Broken(e),
            }
        }
        reading.input.drain(..taken);
        // A large reply's room is not kept for the worker's life.
        if reading.input.is_empty() && reading.input.capacity() > KEPT_ROOM {
            reading.input = Vec::new();
        }
        let Some(registered) = reading.registered.as_ref() else {
            return Ending::Closed;
        };
        let mut ready = match registered.readable().await {
            Ok(ready) => ready,
            Err(e) => return Ending::Broken(e),
        };
        match ready.try_io(|fd| receive(*fd.get_ref(), &mut reading.input)) {
            // The end, even inside a frame (a worker killed while it
            // wrote): how it ended is its exit status's to say (`reap`).
            Ok(Ok((0, _))) => return Ending::Closed,
            // Less than there was room for: all there was, so wait for
            // more rather than try again (which would only say so).
            Ok(Ok((got, room))) if got < room => ready.clear_ready(),
            Ok(Ok(_)) => {}
            // The worker died and the kernel reset its end (see `reader`).
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ending::Closed,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Ok(Err(e)) => return Ending::Broken(e),
            // Not readable after all: wait again.
            Err(_would_block) => {}
        }
    }
}

/// Read what is there, without blocking (the descriptor itself stays in
/// blocking mode: plughost writes requests on a duplicate of it, which
/// shares that mode): how much it read, and how much there was room for.
fn receive(fd: RawFd, input: &mut Vec<u8>) -> std::io::Result<(usize, usize)> {
    input.reserve(16 * 1024);
    let spare = input.spare_capacity_mut();
    let room = spare.len();
    // SAFETY: `fd` is the open descriptor of the stream `Reading` owns (it
    // outlives its registration), and the pointer and length describe
    // `input`'s spare capacity, which `recv` only writes to.
    let n = unsafe { libc::recv(fd, spare.as_mut_ptr().cast(), room, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: `recv` initialised the first `n` bytes of the spare capacity.
    unsafe { input.set_len(input.len() + n) };
    Ok((n, room))
}
