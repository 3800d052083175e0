//! One running worker process: its socket, the calls in flight, stopping and reaping it.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::core::outcome::{ExitCause, PluginFault, ResourceLimit};
use crate::isolation::protocol::{encode_frame, Envelope, Reply, Request};

/// Where a reply goes: an awaiting future or a blocked thread.
pub(super) enum Waiter {
    Async(tokio::sync::oneshot::Sender<Result<Reply, PluginFault>>),
    Blocking(std::sync::mpsc::SyncSender<Result<Reply, PluginFault>>),
    /// The steps of a batch, each with whether it is the last one.
    Stream(tokio::sync::mpsc::UnboundedSender<Result<(Reply, bool), PluginFault>>),
}

impl Waiter {
    pub(super) fn send(self, r: Result<Reply, PluginFault>) {
        match self {
            Waiter::Async(tx) => {
                let _ = tx.send(r);
            }
            Waiter::Blocking(tx) => {
                let _ = tx.try_send(r);
            }
            Waiter::Stream(tx) => {
                let _ = tx.send(r.map(|reply| (reply, true)));
            }
        }
    }
}

/// One running worker process.
pub(super) struct Live {
    pub(super) key: String,
    pub(super) child: Mutex<super::WorkerProcess>,
    /// plughost's end of the socket; writes are whole frames under the lock.
    pub(super) stream: Mutex<UnixStream>,
    pub(super) pending: Mutex<Pending>,
    pub(super) next_id: AtomicU64,
    /// Why plughost stopped it, when it did (not a crash).
    pub(super) stop_reason: Mutex<Option<String>>,
    /// The limit it said it went past before ending itself.
    pub(super) exceeded: Mutex<Option<ResourceLimit>>,
    /// It did not acknowledge a cancel within this bound (ms) and was
    /// killed as wedged.
    pub(super) wedged: Mutex<Option<u64>>,
    /// It answered a call since it loaded (a worker that dies before that
    /// is crashing in a loop, see [`super::backoff`]).
    pub(super) answered: std::sync::atomic::AtomicBool,
    /// iso-parity: where its calls into the host run.
    pub(super) host: crate::isolation::host_link::HostSide,
}

#[derive(Default)]
pub(super) struct Pending {
    pub(super) waiters: HashMap<u64, Waiter>,
    /// Set once the worker is gone: every later request fails with it.
    pub(super) ended: Option<PluginFault>,
}

impl Live {
    /// Queue `body` for the worker; its reply goes to `waiter`.
    pub(super) fn send(&self, body: Request, waiter: Waiter) -> Result<u64, PluginFault> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(fault) = &pending.ended {
                return Err(fault.clone());
            }
            pending.waiters.insert(id, waiter);
        }
        SEND_BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            encode_frame(&mut buf, &Envelope { id, body }).map_err(|e| {
                self.forget(id);
                PluginFault::Unavailable {
                    plugin: self.key.clone(),
                    problem: e.to_string(),
                }
            })?;
            let stream = self.stream.lock().unwrap_or_else(|e| e.into_inner());
            if send_all(&stream, &buf).is_err() {
                // The worker is gone; its reader fails the waiter with the cause.
                drop(stream);
                self.kill(None);
            }
            Ok(id)
        })
    }

    /// Send `body`, which the worker does not answer (no waiter; a worker
    /// gone is its reader's to notice).
    pub(super) fn send_unanswered(&self, body: Request) {
        SEND_BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            if encode_frame(&mut buf, &Envelope { id: 0, body }).is_ok() {
                let stream = self.stream.lock().unwrap_or_else(|e| e.into_inner());
                let _ = send_all(&stream, &buf);
            }
        });
    }

    /// iso-parity: let the worker run the plugin's teardown before it is
    /// killed: its request stream is closed (the worker runs the teardown
    /// when it sees the end, then exits) and its exit is waited for, at
    /// most `limit`. No reply is awaited: this may run on the very thread
    /// that would read it.
    pub(super) fn unload(&self, limit: Duration) {
        if self.has_ended() || self.is_stopped() {
            return;
        }
        // Its exit is plughost's doing, not a crash.
        self.stop_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(|| "plughost is done with it".into());
        {
            let stream = self.stream.lock().unwrap_or_else(|e| e.into_inner());
            let _ = stream.shutdown(std::net::Shutdown::Write);
        }
        let pid = self.child.lock().unwrap_or_else(|e| e.into_inner()).id();
        tracing::debug!("plugin '{}': its worker runs its teardown", self.key);
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if process_gone(pid) {
                tracing::debug!("plugin '{}': its worker ended", self.key);
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub(super) fn has_ended(&self) -> bool {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.ended.is_some()
    }

    /// plughost stopped it: it is dying even if its reader has not seen
    /// the end yet, so no new call goes to it.
    pub(super) fn is_stopped(&self) -> bool {
        self.stop_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    pub(super) fn forget(&self, id: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.waiters.remove(&id);
    }

    /// plughost no longer waits for call `id` (past its time limit, or its
    /// caller went away): forget it and have the worker cancel that call
    /// alone, so the other calls in flight there go on. A worker that does
    /// not acknowledge the cancel within [`CANCEL_BOUND`] is wedged (its
    /// interpreter held for good): it is killed, and the calls it had fail
    /// with [`PluginFault::Wedged`].
    pub(super) fn cancel(self: &Arc<Self>, id: u64) {
        self.forget(id);
        if self.has_ended() || self.is_stopped() {
            return;
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if self
            .send(Request::Cancel { call: id }, Waiter::Blocking(tx))
            .is_err()
        {
            return; // gone: its reader fails the rest
        }
        let live = self.clone();
        let watched = std::thread::Builder::new()
            .name(format!("plughost-cancel-{}", self.key))
            .spawn(move || {
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    rx.recv_timeout(CANCEL_BOUND)
                {
                    live.wedged(CANCEL_BOUND);
                }
            });
        if let Err(e) = watched {
            tracing::warn!(
                "cannot watch the cancel of a call of plugin '{}' ({e}); its worker is replaced",
                self.key
            );
            self.wedged(Duration::ZERO);
        }
    }

    /// Kill a worker that did not answer within `bound` as wedged.
    fn wedged(&self, bound: Duration) {
        if self.has_ended() {
            return;
        }
        let after_ms = bound.as_millis() as u64;
        *self.wedged.lock().unwrap_or_else(|e| e.into_inner()) = Some(after_ms);
        tracing::warn!(
            "the worker of plugin '{}' did not acknowledge a cancelled call within {} s: it is wedged and is replaced",
            self.key,
            crate::core::outcome::seconds_text(bound)
        );
        self.kill(Some("it was wedged".into()));
    }

    /// Kill the process (if it still runs); `reason` marks it as stopped by
    /// plughost rather than crashed.
    pub(super) fn kill(&self, reason: Option<String>) {
        if let Some(reason) = reason {
            let mut slot = self.stop_reason.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert(reason);
        }
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(child.try_wait(), Ok(None)) {
            // The whole group: the worker and whatever its plugin started.
            // SAFETY: a signal to the worker's own process group (its id),
            // which exists while the unreaped worker does.
            if unsafe { libc::killpg(child.id() as i32, libc::SIGKILL) } != 0 {
                let _ = child.kill();
            }
        }
    }

    /// Reap the process after its stream ended: how it ended, killing it
    /// if it lingers without its stream (it closed the descriptor itself).
    pub(super) fn reap(&self) -> Result<ExitCause, String> {
        let deadline = Instant::now() + LINGER;
        loop {
            {
                let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
                match child.try_wait() {
                    Ok(Some(status)) => {
                        return Ok(match (status.signal(), status.code()) {
                            (Some(n), _) => ExitCause::Signal {
                                number: n,
                                name: signal_name(n),
                            },
                            (None, Some(code)) => ExitCause::Exit { code },
                            (None, None) => ExitCause::Exit { code: -1 },
                        });
                    }
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        return Err("it closed its protocol stream".into());
                    }
                    Ok(None) => {}
                    Err(e) => return Err(format!("its status is unknown: {e}")),
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Watch worker `pid` itself, not only its stream (a child its plugin
/// forked may hold the stream open after the worker died): when it exits,
/// kill what is left of its process group and shut the stream down, so the
/// reader sees the end at once. The exit status is left for [`Live::reap`]
/// (`WNOWAIT`).
pub(super) fn watch_process(key: &str, pid: u32, stream: UnixStream) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("plughost-watch-{key}"))
        .spawn(move || {
            // SAFETY: waitid writes only into `info`, a zeroed siginfo_t we own.
            let exited = unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                loop {
                    let rc = libc::waitid(
                        libc::P_PID,
                        pid as libc::id_t,
                        &mut info,
                        libc::WEXITED | libc::WNOWAIT,
                    );
                    if rc == 0
                        || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
                    {
                        break rc == 0;
                    }
                }
            };
            if exited {
                // SAFETY: the worker is a zombie (not reaped: WNOWAIT), so its
                // group id still names its group; SIGKILL to what is left.
                unsafe { libc::killpg(pid as i32, libc::SIGKILL) };
            }
            let _ = stream.shutdown(std::net::Shutdown::Both);
        })
        .map(|_| ())
}

/// How long a worker has to acknowledge a cancel before it counts as
/// wedged. A responsive interpreter takes the request within a few of its
/// 5 ms thread switch intervals; only a held GIL (a C call that does not
/// release it, a deadlock) or a stopped process takes this long.
pub(super) const CANCEL_BOUND: Duration = Duration::from_secs(3);
/// Whether process `pid` ended (a zombie, or gone): read from `/proc`, as
/// the worker may not be this process's own child (its sandbox starts it).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

/// How long a worker may live on after closing its stream.
pub(super) const LINGER: Duration = Duration::from_millis(500);

thread_local! {
    /// Where a request is encoded (per thread, so sending allocates nothing
    /// once it has grown and encoding holds no lock).
    pub(super) static SEND_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Write all of `bytes` without raising SIGPIPE when the worker is gone
/// (the CLI restores SIGPIPE's default action, which would end plughost).
pub(super) fn send_all(stream: &UnixStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: the descriptor is open for as long as `stream` is borrowed,
        // and the pointer and length describe the live slice `bytes`.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// `SIGSEGV` for 11, `signal 64` for a number without a name.
pub fn signal_name(n: i32) -> String {
    let name = match n {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGALRM => "SIGALRM",
        _ => return format!("signal {n}"),
    };
    name.to_string()
}
