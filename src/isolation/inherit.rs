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
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// How many descriptors may be registered at once (a listener and two
/// stdio duplicates is what plughost uses).
const SLOTS: usize = 16;

/// The registered descriptors, `-1` for a free slot. Process-wide like the
/// descriptor table it mirrors (not host state); read by the child handler,
/// which may only do async-signal-safe work: atomic loads and `close`.
static FDS: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];

/// The file each registered descriptor was (device, inode), so a child
/// closes a number only while it still names that file: a guard that
/// outlives its descriptor (closed first, its number reused by a file
/// opened for the child, such as a worker's sandbox ruleset) must not
/// close the new one in the child.
static FILES: [(AtomicU64, AtomicU64); SLOTS] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; SLOTS];

/// (device, inode) of `fd`, if it is open.
fn identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: fstat writes only into `st`, a zeroed stat owned here; it
    // is async-signal-safe (also called in the forked child).
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

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
    if let (Some(slot), Some((dev, ino))) = (slot, identity(fd)) {
        FILES[slot].0.store(dev, Ordering::SeqCst);
        FILES[slot].1.store(ino, Ordering::SeqCst);
    }
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
    for (i, slot) in FDS.iter().enumerate() {
        let fd = slot.load(Ordering::SeqCst);
        if fd < 0 {
            continue;
        }
        let want = (
            FILES[i].0.load(Ordering::SeqCst),
            FILES[i].1.load(Ordering::SeqCst),
        );
        if identity(fd) == Some(want) {
            // SAFETY: close is async-signal-safe; in the child this
            // descriptor is plughost's copy (still the registered file),
            // which nothing there uses.
            unsafe { libc::close(fd) };
        }
        slot.store(-1, Ordering::SeqCst);
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
