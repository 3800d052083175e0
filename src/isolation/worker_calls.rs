//! The calls a worker is running, so that plughost can cancel one of them
//! alone (issue 47 item 2, [`Request::Cancel`](super::protocol::Request::Cancel)).
//!
//! A call plughost gave up on (past its time limit, or its caller went
//! away) used to cost the whole worker, and with it every other call in
//! flight there. Now plughost names the call: an async handler's task is
//! aborted (dropping its future cancels the Python task on its loop, see
//! `runtime::bridge`), a sync handler's thread cannot be stopped and is
//! left to finish, its answer dropped. A batch (a tool call and its hooks)
//! stops before its next step.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;

/// One running call: whether plughost cancelled it, and the task of its
/// async handler (or async step) while one runs.
#[derive(Default)]
pub(super) struct Token {
    cancelled: AtomicBool,
    task: Mutex<Option<AbortHandle>>,
}

impl Token {
    /// Whether plughost cancelled the call: its answer is not to be sent,
    /// and no further step of it run.
    pub(super) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// The task now running the call's handler (aborted at once if the
    /// call was cancelled meanwhile).
    pub(super) fn set_task(&self, task: AbortHandle) {
        let mut slot = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_cancelled() {
            task.abort();
        } else {
            *slot = Some(task);
        }
    }

    fn cancel(&self) {
        let mut slot = self.task.lock().unwrap_or_else(|e| e.into_inner());
        self.cancelled.store(true, Ordering::Release);
        if let Some(task) = slot.take() {
            task.abort();
        }
    }
}

/// How many cancels of calls not (yet) seen are remembered: a cancel can
/// be read by one serving thread before another has begun the call it
/// names (both frames came in one read).
const EARLY: usize = 256;

/// The worker's calls in flight, by request id.
#[derive(Default)]
pub(super) struct Calls {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    running: HashMap<u64, Arc<Token>>,
    /// Cancels that came before their call began (or after it ended).
    early: VecDeque<u64>,
}

impl Calls {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Call `id` starts; `None`: it was cancelled already (do not run it).
    pub(super) fn begin(&self, id: u64) -> Option<Arc<Token>> {
        let mut inner = self.lock();
        if let Some(at) = inner.early.iter().position(|&c| c == id) {
            inner.early.remove(at);
            return None;
        }
        let token = Arc::new(Token::default());
        inner.running.insert(id, token.clone());
        Some(token)
    }

    /// Call `id` is done (answered or dropped).
    pub(super) fn end(&self, id: u64) {
        self.lock().running.remove(&id);
    }

    /// Cancel call `id`: whether it was running.
    pub(super) fn cancel(&self, id: u64) -> bool {
        let token = {
            let mut inner = self.lock();
            match inner.running.remove(&id) {
                Some(token) => token,
                None => {
                    if inner.early.len() >= EARLY {
                        inner.early.pop_front();
                    }
                    inner.early.push_back(id);
                    return false;
                }
            }
        };
        token.cancel();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_read_before_its_call_keeps_the_call_from_running() {
        let calls = Calls::default();
        assert!(!calls.cancel(7));
        assert!(calls.begin(7).is_none());
        // Only once: a later call with another id runs.
        assert!(calls.begin(8).is_some());
    }

    #[test]
    fn a_cancelled_call_is_marked_and_forgotten() {
        let calls = Calls::default();
        let token = calls.begin(3).unwrap();
        assert!(!token.is_cancelled());
        assert!(calls.cancel(3));
        assert!(token.is_cancelled());
        calls.end(3);
        assert!(calls.lock().running.is_empty());
    }
}
