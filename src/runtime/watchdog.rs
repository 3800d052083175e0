//! Bounding a sync Python call in place: past its limit a `TimeoutError` is
//! raised in the thread running it (seen between two bytecodes), which ends
//! Python code that loops or spins. A call blocked inside C for good (one
//! long `time.sleep`, a blocking read) cannot be stopped in-process: that is
//! what isolation is for (`docs/reliability.md`).
//!
//! Every hook call under `--hook-timeout` is watched, so starting and ending
//! a watch is on the per-call path: it reads no clock and takes no lock.
//! Each thread has a slot whose generation it bumps at both ends (odd while
//! a call is watched); the one watchdog thread notes when it first sees a
//! generation and raises once that is `limit` old. It looks every `TICK`,
//! so a call ends at most a tick past its limit, never before; after a
//! second with nothing watched it sleeps until a watch starts.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use pyo3::ffi;

use super::threads::try_attach;

/// How often the watchdog looks while calls are watched: the most a call
/// may run past its limit before its `TimeoutError` is raised.
const TICK: Duration = Duration::from_millis(20);

/// How many looks in a row must find nothing watched before the dog sleeps
/// until poked: calls come in runs (a hook between two others), and a dog
/// that slept between them would be woken, a system call, on every one.
const IDLE_LOOKS: u32 = 50;

/// One thread's watched call, as the watchdog sees it.
struct Slot {
    /// Odd while a call is watched: each start and each end adds one, so
    /// the dog tells one call from the next without a clock on their path.
    generation: AtomicU64,
    /// The watched call's limit, in nanoseconds.
    limit: AtomicU64,
    /// The generation the dog raised `TimeoutError` for (0: none).
    fired: AtomicU64,
    /// Watches open on the thread (a watched call that starts another one
    /// leaves the outer watch in charge). Only the thread itself counts.
    depth: AtomicU64,
    /// Python's identity of the thread.
    thread: std::os::raw::c_ulong,
}

thread_local! {
    static SLOT: Arc<Slot> = watchdog().enrol();
}

impl Slot {
    fn new() -> Slot {
        Slot {
            generation: AtomicU64::new(0),
            limit: AtomicU64::new(0),
            fired: AtomicU64::new(0),
            depth: AtomicU64::new(0),
            // SAFETY: reads the calling thread's identity; no interpreter state is touched.
            thread: unsafe { ffi::PyThread_get_thread_ident() },
        }
    }
}

/// A watched sync Python call (see the module); ended when dropped, when an
/// exception raised too late to matter is withdrawn. Stays on its thread.
pub struct Watch {
    /// `None`: the thread's own slot, looked up again when needed, so a
    /// watch takes no reference count; a slot of its own on a thread whose
    /// slot is already torn down.
    own: Option<Arc<Slot>>,
    /// The call's generation; 0 for a watch inside another one.
    generation: u64,
    _on_this_thread: PhantomData<*const ()>,
}

/// Run `f` on the slot a watch started on; nothing if the thread's slot was
/// torn down in between (only a watch kept in another thread-local can
/// outlive it; every watch of plughost's ends within the call it bounds).
fn with_slot<R>(own: Option<&Arc<Slot>>, f: impl FnOnce(&Slot) -> R) -> Option<R> {
    match own {
        Some(slot) => Some(f(slot)),
        None => SLOT.try_with(|slot| f(slot)).ok(),
    }
}

/// Start watching the calling thread's Python call, bounded by `limit`.
///
/// One locked instruction at each end (each pairs with the dog's view of
/// the generation); the nesting depth is the thread's alone, counted with
/// plain loads and stores.
pub fn watch(limit: Duration) -> Watch {
    let start = |slot: &Slot| {
        let depth = slot.depth.load(Ordering::Relaxed);
        slot.depth.store(depth + 1, Ordering::Relaxed);
        if depth > 0 {
            return 0;
        }
        let nanos = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX);
        slot.limit.store(nanos, Ordering::Relaxed);
        slot.generation.fetch_add(1, Ordering::SeqCst) + 1
    };
    // A thread being torn down has no slot any more: its call runs unwatched.
    let (own, generation) = match SLOT.try_with(|slot| start(slot)) {
        Ok(generation) => (None, generation),
        Err(_) => {
            let slot = Arc::new(Slot::new());
            let generation = start(&slot);
            (Some(slot), generation)
        }
    };
    if generation != 0 {
        watchdog().poke();
    }
    Watch {
        own,
        generation,
        _on_this_thread: PhantomData,
    }
}

impl Watch {
    /// Whether the call went past its limit (the `TimeoutError` was raised);
    /// for a watch inside another one, whether the outer call did.
    pub fn fired(&self) -> bool {
        with_slot(self.own.as_ref(), |slot| {
            let generation = match self.generation {
                0 => slot.generation.load(Ordering::SeqCst),
                g => g,
            };
            slot.fired.load(Ordering::SeqCst) == generation
        })
        .unwrap_or(false)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let generation = self.generation;
        with_slot(self.own.as_ref(), |slot| {
            let depth = slot.depth.load(Ordering::Relaxed);
            debug_assert!(depth > 0, "a watch ended that never started");
            slot.depth.store(depth.saturating_sub(1), Ordering::Relaxed);
            if generation == 0 {
                return;
            }
            slot.generation.fetch_add(1, Ordering::SeqCst);
            // The dog raises with the GIL held and only while the generation is
            // still this call's; seen fired here, it has raised or will before
            // it lets the GIL go, so the withdrawal (with the GIL) comes after.
            if slot.fired.load(Ordering::SeqCst) == generation {
                // SAFETY: with the GIL held; a null exception withdraws one not yet raised.
                let _ = try_attach(|_py| unsafe {
                    ffi::PyThreadState_SetAsyncExc(slot.thread as _, std::ptr::null_mut())
                });
            }
        });
    }
}

/// The process's one watchdog thread and the threads' slots.
struct Watchdog {
    slots: Mutex<Vec<Weak<Slot>>>,
    /// Slots enrolled so far (the dog looks again before sleeping if it
    /// missed one).
    enrolled: AtomicU64,
    /// Set while the dog sleeps until poked (nothing watched).
    asleep: AtomicBool,
    bell: Mutex<()>,
    wake: Condvar,
}

fn watchdog() -> &'static Watchdog {
    static DOG: OnceLock<&'static Watchdog> = OnceLock::new();
    DOG.get_or_init(|| {
        let dog: &'static Watchdog = Box::leak(Box::new(Watchdog {
            slots: Mutex::new(Vec::new()),
            enrolled: AtomicU64::new(0),
            asleep: AtomicBool::new(false),
            bell: Mutex::new(()),
            wake: Condvar::new(),
        }));
        let _ = std::thread::Builder::new()
            .name("plughost-watchdog".into())
            .spawn(move || dog.run());
        dog
    })
}

/// What the dog knows of a slot: the generation it last saw, and when.
struct Seen {
    slot: Weak<Slot>,
    generation: u64,
    since: Instant,
}

impl Watchdog {
    /// The calling thread's slot, known to the dog from now on.
    fn enrol(&self) -> Arc<Slot> {
        let slot = Arc::new(Slot::new());
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|s| s.strong_count() > 0);
        slots.push(Arc::downgrade(&slot));
        self.enrolled.fetch_add(1, Ordering::SeqCst);
        slot
    }

    /// Wake the dog if it sleeps until poked.
    fn poke(&self) {
        if self.asleep.load(Ordering::SeqCst) {
            let _bell = self.bell.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_one();
        }
    }

    fn run(&self) {
        let mut seen: Vec<Seen> = Vec::new();
        let mut idle = 0;
        loop {
            let known = self.enrolled.load(Ordering::SeqCst);
            {
                let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
                seen.retain(|s| s.slot.strong_count() > 0);
                for slot in slots.iter() {
                    if !seen.iter().any(|s| s.slot.ptr_eq(slot)) {
                        seen.push(Seen {
                            slot: slot.clone(),
                            generation: 0,
                            since: Instant::now(),
                        });
                    }
                }
            }
            let now = Instant::now();
            let mut watched = false;
            let mut due = Vec::new();
            for s in &mut seen {
                let Some(slot) = s.slot.upgrade() else {
                    continue;
                };
                let generation = slot.generation.load(Ordering::SeqCst);
                if generation % 2 == 0 {
                    continue;
                }
                watched = true;
                if generation != s.generation {
                    s.generation = generation;
                    s.since = now;
                }
                let limit = Duration::from_nanos(slot.limit.load(Ordering::Relaxed));
                let overdue = now.saturating_duration_since(s.since) >= limit;
                if overdue && slot.fired.load(Ordering::SeqCst) != generation {
                    due.push((slot, generation));
                }
            }
            if !due.is_empty() {
                let _ = try_attach(|_py| {
                    for (slot, generation) in due {
                        slot.fired.store(generation, Ordering::SeqCst);
                        if slot.generation.load(Ordering::SeqCst) == generation {
                            // SAFETY: with the GIL held; PyExc_TimeoutError is a
                            // static type object, and SetAsyncExc takes its own reference.
                            unsafe {
                                ffi::PyThreadState_SetAsyncExc(
                                    slot.thread as _,
                                    ffi::PyExc_TimeoutError,
                                )
                            };
                        }
                    }
                });
            }
            idle = if watched { 0 } else { idle + 1 };
            if idle < IDLE_LOOKS {
                std::thread::sleep(TICK);
                continue;
            }
            // Nothing watched: sleep until a watch starts. `asleep` is set
            // before looking again, so a watch that starts after that look
            // finds it set and rings.
            let bell = self.bell.lock().unwrap_or_else(|e| e.into_inner());
            self.asleep.store(true, Ordering::SeqCst);
            let started = seen.iter().any(|s| {
                s.slot
                    .upgrade()
                    .is_some_and(|slot| slot.generation.load(Ordering::SeqCst) % 2 == 1)
            });
            if !started && self.enrolled.load(Ordering::SeqCst) == known {
                drop(self.wake.wait(bell).unwrap_or_else(|e| e.into_inner()));
            }
            self.asleep.store(false, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pyo3::prelude::*;

    /// A Python loop past its limit ends with `TimeoutError`; one within it
    /// is left alone, and so is the code that runs after a watch ended.
    #[test]
    fn a_spinning_call_is_ended_past_its_limit_and_only_it() {
        Python::initialize();
        Python::attach(|py| {
            let spin =
                c"import time\nt = time.monotonic()\nwhile time.monotonic() - t < 30: pass\n";
            let spinning = watch(Duration::from_millis(100));
            let started = Instant::now();
            let err = py.run(spin, None, None).unwrap_err();
            assert!(err.is_instance_of::<pyo3::exceptions::PyTimeoutError>(py));
            assert!(started.elapsed() >= Duration::from_millis(100));
            assert!(spinning.fired());
            drop(spinning);
            let quick = watch(Duration::from_secs(5));
            py.run(c"x = sum(range(1000))", None, None).unwrap();
            assert!(!quick.fired());
            drop(quick);
            // A second watch nested inside leaves the outer one in charge.
            let outer = watch(Duration::from_millis(100));
            let inner = watch(Duration::from_secs(60));
            assert!(py.run(spin, None, None).is_err());
            assert!(inner.fired() && outer.fired());
        });
    }

    /// The dog asleep (nothing watched for a while) is woken by the next
    /// watch, which is then bounded as any other: without the wake-up the
    /// spin would run its whole 30 s and end without an error.
    #[test]
    fn a_watch_wakes_a_sleeping_dog() {
        Python::initialize();
        drop(watch(Duration::from_secs(5)));
        let dog = watchdog();
        let waited = Instant::now();
        while !dog.asleep.load(Ordering::SeqCst) {
            assert!(
                waited.elapsed() < Duration::from_secs(30),
                "the dog never fell asleep"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Python::attach(|py| {
            let spin =
                c"import time\nt = time.monotonic()\nwhile time.monotonic() - t < 30: pass\n";
            let spinning = watch(Duration::from_millis(50));
            let err = py.run(spin, None, None).unwrap_err();
            assert!(err.is_instance_of::<pyo3::exceptions::PyTimeoutError>(py));
            assert!(spinning.fired());
        });
    }
}
