//! plughost's own descriptors are closed in a child an in-process plugin
//! forks without exec (`os.fork()`, `multiprocessing`'s fork start
//! method). Close-on-exec covers children that exec; a bare fork copies
//! every descriptor, so a forked child that lives on would keep `serve`'s
//! listening socket (its port accepting after `serve` exits, never
//! answering) or `mcp`'s stdio duplicates (the MCP client never seeing
//! EOF). A `pthread_atfork` child handler closes the descriptors
//! registered here; the child keeps everything else (its own files, the
//! plugin's sockets, fds 0–2).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};

/// How many descriptors may be registered at once (a listener and two
/// stdio duplicates is what plughost uses).
const SLOTS: usize = 16;

/// The registered descriptors, `-1` for a free slot. Process-wide like the
/// descriptor table it mirrors (not host state); read by the child handler,
/// which may only do async-signal-safe work: atomic loads and `close`.
static FDS: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];

/// While alive, `fd` is closed in forked children. Drop it before closing
/// the descriptor, so a number reused later is not closed in a child.
#[must_use = "the descriptor is closed in forked children only while this lives"]
pub struct ClosedInForks {
    slot: usize,
}

/// Close `fd` in every child forked while the returned guard lives.
/// `None` when every slot is taken (the descriptor is then inherited, as
/// before; logged).
pub fn close_in_forked_children(fd: RawFd) -> Option<ClosedInForks> {
    install();
    let slot = FDS.iter().position(|s| {
        s.compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    });
    if slot.is_none() {
        tracing::warn!("descriptor {fd} stays inherited by forked children: no free slot");
    }
    slot.map(|slot| ClosedInForks { slot })
}

impl Drop for ClosedInForks {
    fn drop(&mut self) {
        FDS[self.slot].store(-1, Ordering::SeqCst);
    }
}

extern "C" fn in_child() {
    for slot in &FDS {
        let fd = slot.load(Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: close is async-signal-safe; in the child this
            // descriptor is plughost's copy, which nothing there uses.
            unsafe { libc::close(fd) };
            slot.store(-1, Ordering::SeqCst);
        }
    }
}

fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a child handler that only does
        // async-signal-safe work (see `in_child`); no prepare or parent
        // handler.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            tracing::warn!(
                "pthread_atfork failed ({rc}): forked children inherit plughost's descriptors"
            );
        }
    });
}
