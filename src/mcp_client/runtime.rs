//! Where the MCP connections of one host live: the process's tokio
//! runtime ([`crate::runtime::Runtime::tokio`]).
//!
//! A connection (a stdio child's reader, an HTTP session) must outlive
//! whatever runtime asked for it: `Host::build` is synchronous and may run
//! outside any runtime (the wheel) or inside one that ends before the host
//! does (a test's). The process's runtime lives as long as the process;
//! calls from any runtime or thread are sent to it and awaited. A
//! connection ends with its server, dropped with the host (its child is
//! killed, its session cancelled).

use std::future::Future;

use tokio::runtime::Handle;

/// One host's way onto the process's tokio runtime.
pub struct ClientRuntime {
    handle: Handle,
}

impl ClientRuntime {
    /// The process's runtime (built now if it was not yet).
    pub fn new() -> std::io::Result<ClientRuntime> {
        let handle = crate::runtime::Runtime::current().tokio().handle().clone();
        Ok(ClientRuntime { handle })
    }

    /// Where its tasks are spawned.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Run `future` on it and wait on this thread (from any thread, also a
    /// worker of a runtime: it blocks only this thread). `None` when the
    /// future did not finish.
    pub fn wait<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        crate::runtime::wait_on_process(future)
    }
}
