//! The worker's end of the host-call channel: sends a
//! [`Reply::HostCall`] on the protocol stream (under the same lock as the
//! worker's replies, so frames never interleave) and blocks the caller
//! until the [`Request::HostAnswer`] naming it arrives.
//!
//! After loading, answers are read by the worker's serving threads (one
//! always waits for the next request) and handed over by `answered`.
//! While the plugin loads no serving thread exists yet, and nothing but
//! answers can arrive (plughost waits for `Loaded`): a call made in
//! `register()` reads its answer from the stream itself.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use crate::dialects::host_calls::{HostCall, HostCalls};
use crate::isolation::protocol::{encode_frame, read_frame, Envelope, Reply, Request};

type Answer = Result<Value, String>;

/// The channel of this worker process.
pub(crate) struct Channel {
    output: Arc<Mutex<File>>,
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, SyncSender<Answer>>>,
    /// The request stream while the plugin loads (then `None`).
    loading: Mutex<Option<File>>,
}

static CHANNEL: OnceLock<Arc<Channel>> = OnceLock::new();

/// Set up the channel on the worker's streams, before the plugin loads.
pub(crate) fn install(output: Arc<Mutex<File>>, input: &File) -> Option<Arc<Channel>> {
    let loading = input.try_clone().ok();
    let channel = Arc::new(Channel {
        output,
        next: AtomicU64::new(1),
        waiting: Mutex::new(HashMap::new()),
        loading: Mutex::new(loading),
    });
    CHANNEL.set(channel.clone()).ok()?;
    Some(channel)
}

/// This worker's channel to its host (`None` outside a worker).
pub(crate) fn channel() -> Option<Arc<dyn HostCalls>> {
    CHANNEL.get().map(|c| Arc::clone(c) as Arc<dyn HostCalls>)
}

/// The plugin loaded: answers now come through the serving threads.
pub(crate) fn loaded() {
    if let Some(channel) = CHANNEL.get() {
        *channel.loading.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// The host's answer to call `call` arrived.
pub(crate) fn answered(call: u64, result: Answer) {
    let Some(channel) = CHANNEL.get() else {
        return;
    };
    let waiter = channel
        .waiting
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&call);
    if let Some(tx) = waiter {
        let _ = tx.try_send(result);
    }
}

impl Channel {
    fn send(&self, number: u64, call: HostCall) -> Result<(), String> {
        let mut buf = Vec::new();
        encode_frame(
            &mut buf,
            &Envelope {
                id: 0,
                body: Reply::HostCall {
                    call: number,
                    body: call,
                },
            },
        )
        .map_err(|e| format!("the call cannot be sent: {e}"))?;
        let mut out = self.output.lock().unwrap_or_else(|e| e.into_inner());
        out.write_all(&buf)
            .map_err(|e| format!("the host is gone: {e}"))
    }

    /// While loading: read the stream here until this call's answer.
    fn answer_while_loading(&self, input: &mut File, number: u64) -> Answer {
        loop {
            match read_frame::<_, Envelope<Request>>(input) {
                Ok(Some(Envelope {
                    body: Request::HostAnswer { call, result },
                    ..
                })) if call == number => return result,
                Ok(Some(other)) => {
                    tracing::warn!(
                        "a request came while the plugin was loading; dropped: {:?}",
                        other.id
                    );
                }
                Ok(None) => return Err("the host closed the stream".into()),
                Err(e) => return Err(format!("the host's answer cannot be read: {e}")),
            }
        }
    }
}

impl HostCalls for Channel {
    fn call(&self, call: HostCall) -> Answer {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        {
            let mut loading = self.loading.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(input) = loading.as_mut() {
                self.send(number, call)?;
                return self.answer_while_loading(input, number);
            }
        }
        let (tx, rx) = sync_channel(1);
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(number, tx);
        if let Err(e) = self.send(number, call) {
            self.waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&number);
            return Err(e);
        }
        // The worker ends when the stream does, so an answer or the end comes.
        rx.recv()
            .unwrap_or_else(|_| Err("the host did not answer".into()))
    }
}
