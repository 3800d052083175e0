//! The tokio runtime the MCP connections of one host live on.
//!
//! A connection (a stdio child's reader, an HTTP session) must outlive
//! whatever runtime asked for it: `Host::build` is synchronous and may run
//! outside any runtime (the wheel) or inside one that ends before the host
//! does (a CLI command's, a test's). So each host with MCP servers has one
//! small runtime of its own (one worker thread), dropped with the host;
//! calls from any runtime or thread are sent to it and awaited. A host
//! without MCP servers has none.

use std::future::Future;

use tokio::runtime::{Handle, Runtime};

/// One host's MCP runtime; shut down in the background when dropped (a
/// host may be dropped inside another runtime, where blocking is refused).
pub struct ClientRuntime {
    runtime: Option<Runtime>,
    handle: Handle,
}

impl ClientRuntime {
    pub fn new() -> std::io::Result<ClientRuntime> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("plughost-mcp")
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        Ok(ClientRuntime {
            runtime: Some(runtime),
            handle,
        })
    }

    /// Where its tasks are spawned.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Run `future` on it and wait on this thread (from any thread, also a
    /// worker of another runtime: it blocks only this thread). `None` when
    /// the runtime stopped before the future finished.
    pub fn wait<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.handle.spawn(async move {
            let _ = tx.send(future.await);
        });
        rx.recv().ok()
    }
}

impl Drop for ClientRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
