//! The worker's side of an isolated plugin's scheduled tasks, auth modes
//! and audit/usage sinks (issue 47 item 3): each runs here, when the host
//! asks, on the plugin's own state.

use std::collections::HashMap;
use std::sync::Arc;

use super::protocol::http::{Bytes, HttpHead};
use super::protocol::parts::{AuthWire, ObservedWire};
use super::protocol::{Contribution, Reply};
use super::worker_plugin::Answer;
use crate::core::http_app::{AuthAnswer, AuthMode};
use crate::core::observers::CallObserver;
use crate::core::outcome::PluginError;
use crate::core::schedule::ScheduledTask;

#[derive(Default)]
pub(super) struct Parts {
    tasks: HashMap<String, ScheduledTask>,
    auth: HashMap<String, AuthMode>,
    sinks: Vec<Arc<dyn CallObserver>>,
    /// Model providers that are the plugin's code, by name.
    models: HashMap<String, Arc<dyn crate::core::model_profiles::PluginModel>>,
}

impl Parts {
    pub(super) fn add_task(&mut self, task: ScheduledTask) -> Contribution {
        let announced = Contribution::Task {
            name: task.name.clone(),
            every: task.every,
        };
        self.tasks.insert(task.name.clone(), task);
        announced
    }

    pub(super) fn add_auth(&mut self, mode: AuthMode) -> Contribution {
        let announced = Contribution::AuthMode {
            mode: mode.mode.clone(),
        };
        self.auth.insert(mode.mode.clone(), mode);
        announced
    }

    pub(super) fn add_sink(&mut self, sink: Arc<dyn CallObserver>) -> Contribution {
        let announced = Contribution::Sink {
            owner: sink.owner().to_string(),
            index: self.sinks.len(),
        };
        self.sinks.push(sink);
        announced
    }

    /// A model provider: its profile announced, its code kept here.
    pub(super) fn add_model(
        &mut self,
        profile: crate::core::model_profiles::ModelProfile,
    ) -> Contribution {
        if let Some(code) = &profile.code.0 {
            self.models.insert(profile.name.clone(), code.clone());
        }
        Contribution::ModelProvider { profile }
    }

    /// [`Request::ModelChat`](super::protocol::Request::ModelChat).
    pub(super) fn model_chat(
        &self,
        name: &str,
        model: String,
        request: serde_json::Value,
    ) -> Answer {
        let Some(code) = self.models.get(name) else {
            return Answer::Now(Reply::Refused {
                problem: format!("no model provider '{name}' in this worker"),
            });
        };
        let call = code.chat(model, request);
        Answer::Later(Box::pin(
            async move { Reply::ModelChat { result: call.await } },
        ))
    }

    /// [`Request::RunTask`](super::protocol::Request::RunTask): one run of
    /// the task's body (the host counts runs and keeps them apart).
    pub(super) fn run_task(&self, name: &str) -> Answer {
        let Some(task) = self.tasks.get(name) else {
            return Answer::Now(Reply::Refused {
                problem: format!("no task '{name}' in this worker"),
            });
        };
        let run = task.run.run();
        Answer::Later(Box::pin(async move { Reply::Done { result: run.await } }))
    }

    /// [`Request::Authenticate`](super::protocol::Request::Authenticate).
    pub(super) fn authenticate(&self, mode: &str, head: HttpHead) -> Answer {
        let Some(auth) = self.auth.get(mode) else {
            return Answer::Now(Reply::Refused {
                problem: format!("no auth mode '{mode}' in this worker"),
            });
        };
        let judged = auth.authenticator.authenticate(head.into_request());
        Answer::Later(Box::pin(async move {
            let result = match judged.await {
                Ok(AuthAnswer::Accepted { subject }) => Ok(AuthWire::Accepted { subject }),
                Ok(AuthAnswer::Refused(mut answer)) => {
                    let mut body = Vec::new();
                    let mut failed = None;
                    while let Some(chunk) = answer.body.recv().await {
                        match chunk {
                            Ok(data) => body.extend(data),
                            Err(e) => failed = Some(e),
                        }
                    }
                    match failed {
                        Some(e) => Err(e),
                        None => Ok(AuthWire::Refused {
                            status: answer.status,
                            headers: answer
                                .headers
                                .into_iter()
                                .map(|(k, v)| (Bytes(k), Bytes(v)))
                                .collect(),
                            body: Bytes(body),
                        }),
                    }
                }
                Err(e) => Err(e),
            };
            Reply::Auth { result }
        }))
    }

    /// [`Request::Observe`](super::protocol::Request::Observe): the sink
    /// is told here, on the serving thread; what it does wrong is its own
    /// (it logs it), as in-process.
    pub(super) fn observe(&self, index: usize, call: ObservedWire) -> Answer {
        match self.sinks.get(index) {
            Some(sink) => {
                call.tell(sink.as_ref());
                Answer::Now(Reply::Delivered)
            }
            None => Answer::Now(Reply::Refused {
                problem: PluginError::native(format!("no sink number {index} in this worker"))
                    .message,
            }),
        }
    }
}
