//! Waiting from synchronous code that runs inside an async call — an
//! execution middleware's chain is synchronous, and what it wraps (an
//! isolated plugin's tool, a model call) is a future. On a thread of a
//! multi-thread tokio runtime the wait hands the thread's other tasks to
//! another thread first (`block_in_place`), so the runtime keeps running
//! what the wait is for; elsewhere it simply blocks.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};

use tokio::runtime::{Handle, RuntimeFlavor};

/// Whether this thread may leave its runtime for a while: it is inside a
/// multi-thread runtime (never a current-thread one, where
/// `block_in_place` panics).
fn on_multi_thread_runtime() -> Option<Handle> {
    Handle::try_current()
        .ok()
        .filter(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread)
}

/// Run `wait`, which blocks (see the module doc).
pub fn blocking<R>(wait: impl FnOnce() -> R) -> R {
    match on_multi_thread_runtime() {
        Some(_) => tokio::task::block_in_place(wait),
        None => wait(),
    }
}

/// Drive `fut` to its end on this thread (see the module doc): on a
/// multi-thread runtime with that runtime's drivers, elsewhere by parking
/// between wake-ups (a future needing a current-thread runtime's timers
/// or sockets would wait for ever there; plughost's own futures do not).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    // A future that is ready at once (a sync tool) never leaves the runtime.
    if let Some(ready) = futures_util::FutureExt::now_or_never(fut.as_mut()) {
        return ready;
    }
    if let Some(handle) = on_multi_thread_runtime() {
        return tokio::task::block_in_place(|| handle.block_on(fut));
    }
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
