//! What a Codumentor plugin's `register` subscribes (`bus.on`), recorded
//! and turned into the core registry's hook entries.

use std::sync::Arc;

use pyo3::prelude::*;

use super::*;

/// Receives `bus.on` subscriptions during one plugin's `register`.
#[pyclass(module = "_plughost_codumentor", frozen)]
pub(super) struct Recorder {
    pub(super) key: String,
    pub(super) home: PathBuf,
    pub(super) table: Py<PyAny>,
    pub(super) pending: Mutex<Vec<Registration>>,
}

#[pymethods]
impl Recorder {
    fn __call__(
        &self,
        py: Python<'_>,
        event: String,
        handler: Bound<'_, PyAny>,
        priority: i64,
        entry: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let label: String = entry.getattr("label")?.extract()?;
        let _ = handler;
        if never_fires(&event).is_some() && !OUT_OF_SCOPE.contains(&event.as_str()) {
            tracing::warn!(
                "plugin '{}' subscribes to '{event}', which is not a Codumentor event; it will never fire",
                self.key
            );
        }
        let label_entry = || HookEntry {
            owner: self.key.clone(),
            label: label.clone(),
            priority: priority.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
            callback: Arc::new(Subscription {
                handler: None,
                entry: entry.clone().unbind(),
                table: self.table.clone_ref(py),
            }),
            stats: Arc::new(HookStats::default()),
        };
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let at: Vec<_> = points::points(&event).collect();
        if at.is_empty() {
            // Out of scope or unknown: listed, never fired.
            pending.push(Registration::Hook {
                event: None,
                name: event.clone(),
                entry: label_entry(),
            });
        }
        for (core, rank) in at {
            pending.push(Registration::Hook {
                event: Some(core),
                name: event.clone(),
                entry: HookEntry {
                    owner: self.key.clone(),
                    label: label.clone(),
                    priority: points::core_priority(rank, priority),
                    callback: Arc::new(Subscription {
                        handler: Some(points::Handler {
                            home: self.home.clone(),
                            event: event.clone(),
                            entry: entry.clone().unbind(),
                        }),
                        entry: entry.clone().unbind(),
                        table: self.table.clone_ref(py),
                    }),
                    stats: Arc::new(HookStats::default()),
                },
            });
        }
        Ok(())
    }
}

/// One `bus.on` subscription as the core registry holds it: on its loop
/// point ([`points`]) when plughost fires the event, else listed only.
/// Dropping it (the host goes away, or the plugin's load is rolled back)
/// takes the subscription out of the host's table (`bus.emit`'s).
struct Subscription {
    handler: Option<points::Handler>,
    entry: Py<PyAny>,
    table: Py<PyAny>,
}

impl HookCallback for Subscription {
    fn call(&self, event: HookEvent, payload: HookPayload<'_>) -> HookReturn {
        match &self.handler {
            Some(h) => h.call(event, payload),
            None => HookReturn::Ready(Ok(HookAction::Continue)),
        }
    }

    fn event_name(&self, _event: HookEvent) -> Option<String> {
        self.handler.as_ref().map(|h| h.event.clone())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let _ = try_attach(|py| {
            if let Err(e) = self
                .table
                .bind(py)
                .call_method1("remove", (self.entry.bind(py),))
            {
                tracing::debug!("could not drop a Codumentor subscription: {e}");
            }
        });
    }
}
