//! An isolated plugin's scheduled tasks, auth modes and audit/usage sinks
//! as the host runs them (issue 47 item 3): each run, judgement and
//! observed call goes to the plugin's worker, so none of its code runs in
//! the main process. The host keeps what it keeps for an in-process
//! plugin's: a task's schedule, overlap guard and counts, the server's
//! answer to a refused request.

use std::sync::Arc;
use std::time::Duration;

use super::out_of_protocol;
use crate::core::hooks::BoxFuture;
use crate::core::http_app::{AppRequest, AppResponse, AuthAnswer, AuthMode, Authenticator};
use crate::core::observers::{CallObserver, ObservedModelCall, ObservedToolCall};
use crate::core::outcome::PluginError;
use crate::core::registry::Registration;
use crate::core::schedule::{ScheduledTask, TaskRun};
use crate::isolation::protocol::http::HttpHead;
use crate::isolation::protocol::parts::{AuthWire, ObservedWire};
use crate::isolation::protocol::{Reply, Request};
use crate::isolation::supervisor::{Subject, Supervisor};

/// How long a sink may take to be told of one call (the caller waits, as
/// it waits for an in-process sink).
const SINK_LIMIT: Duration = Duration::from_secs(5);

/// The registration of a server part or a model provider the worker
/// announced (`None` for any other contribution).
pub(super) fn registration(
    sup: &Supervisor,
    contribution: crate::isolation::protocol::Contribution,
) -> Option<Registration> {
    use crate::isolation::protocol::Contribution;
    Some(match contribution {
        Contribution::Routes {
            self_authenticating,
            body_limit,
            rate_limited,
        } => Registration::Routes(super::routes::entry(
            sup,
            self_authenticating,
            body_limit,
            rate_limited,
        )),
        Contribution::Task { name, every } => task(sup, name, every),
        Contribution::AuthMode { mode } => auth_mode(sup, mode),
        Contribution::Sink { owner, index } => sink(sup, owner, index),
        Contribution::ModelProvider { profile } => Registration::ModelProvider(model(sup, profile)),
        Contribution::Report {
            providers,
            not_used,
        } => {
            if let Some(state) = sup.host_state() {
                state.get::<crate::isolation::WorkerReports>().record(
                    sup.key(),
                    providers,
                    not_used,
                );
            }
            return None;
        }
        Contribution::WebProvider { provider } => {
            web_provider(sup, &provider);
            return None;
        }
        _ => return None,
    })
}

fn task(sup: &Supervisor, name: String, every: Duration) -> Registration {
    let run = Arc::new(WorkerTask {
        sup: sup.clone(),
        name: name.as_str().into(),
    });
    Registration::Task(ScheduledTask::new(name, sup.key().to_string(), every, run))
}

fn auth_mode(sup: &Supervisor, mode: String) -> Registration {
    let authenticator = Arc::new(WorkerAuth {
        sup: sup.clone(),
        mode: mode.as_str().into(),
    });
    Registration::Authenticator(AuthMode {
        mode,
        plugin: sup.key().to_string(),
        authenticator,
    })
}

fn sink(sup: &Supervisor, owner: String, index: usize) -> Registration {
    Registration::Observer(Arc::new(WorkerSink {
        sup: sup.clone(),
        owner,
        index,
    }))
}

/// A model provider announced by the worker: one that is the plugin's
/// code gets its calls sent there.
fn model(
    sup: &Supervisor,
    mut profile: crate::core::model_profiles::ModelProfile,
) -> crate::core::model_profiles::ModelProfile {
    if profile.transport == crate::core::model_profiles::Transport::Plugin {
        profile.code = crate::core::model_profiles::CodeHandle(Some(Arc::new(WorkerModel {
            sup: sup.downgrade(),
            name: profile.name.as_str().into(),
        })));
    }
    profile
}

/// A model provider whose code runs in the plugin's worker. The profile
/// lives in the host's extensions, past the plugin's registrations: it
/// holds its supervisor weakly, so letting the plugin go still stops its
/// worker the graceful way (a strong one kept the worker alive to the
/// process's end, where it died as a crash).
struct WorkerModel {
    sup: crate::isolation::supervisor::WeakSupervisor,
    name: Arc<str>,
}

impl crate::core::model_profiles::PluginModel for WorkerModel {
    fn chat(
        &self,
        model: String,
        request: serde_json::Value,
    ) -> BoxFuture<Result<serde_json::Value, String>> {
        let sup = self.sup.upgrade();
        let name = self.name.clone();
        Box::pin(async move {
            let Some(sup) = sup else {
                return Err(format!("model provider '{name}': its plugin was unloaded"));
            };
            let ask = Request::ModelChat {
                name: name.to_string(),
                model,
                request,
            };
            match sup.request(ask, Subject::Model(name)).await {
                Ok(Reply::ModelChat { result }) => result,
                Ok(other) => Err(out_of_protocol(&sup, &other).to_string()),
                Err(e) => Err(e.to_string()),
            }
        })
    }
}

/// How long a web provider's method may run in its worker (a search or
/// an extract of several pages; the tool's own time limit also applies).
const WEB_CALL_LIMIT: Duration = Duration::from_secs(300);

/// A web provider announced by the worker: plughost's tools reach it
/// through a stand-in in this process's registry.
fn web_provider(sup: &Supervisor, provider: &crate::dialects::web_providers::WebProviderWire) {
    let calls = Arc::new(WorkerWeb {
        sup: sup.downgrade(),
    });
    if let Err(e) = crate::dialects::web_providers::register_proxy(provider, calls) {
        tracing::warn!(
            "web provider '{}' of plugin '{}' cannot be offered: {e}",
            provider.name,
            sup.key()
        );
    }
}

/// The stand-in's way to its worker (weakly held: the registry outlives
/// the plugin's registrations, as [`WorkerModel`]'s profile does).
struct WorkerWeb {
    sup: crate::isolation::supervisor::WeakSupervisor,
}

impl crate::dialects::web_providers::WebCalls for WorkerWeb {
    fn call(
        &self,
        name: &str,
        method: &str,
        args: serde_json::Value,
        kwargs: serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        let Some(sup) = self.sup.upgrade() else {
            return Err(format!("web provider '{name}': its plugin was unloaded"));
        };
        let ask = Request::WebProvider {
            name: name.to_string(),
            method: method.to_string(),
            args,
            kwargs,
        };
        let what = format!("web provider '{name}' {method}");
        match sup.request_blocking(ask, WEB_CALL_LIMIT, &what) {
            Ok(Reply::WebProvider { result }) => result.map_err(|e| e.described()),
            Ok(other) => Err(out_of_protocol(&sup, &other).to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
}

struct WorkerTask {
    sup: Supervisor,
    name: Arc<str>,
}

impl TaskRun for WorkerTask {
    fn run(&self) -> BoxFuture<Result<(), PluginError>> {
        let sup = self.sup.clone();
        let name = self.name.clone();
        Box::pin(async move {
            let request = Request::RunTask {
                name: name.to_string(),
            };
            match sup.request(request, Subject::Task(name)).await? {
                Reply::Done { result } => result,
                other => Err(out_of_protocol(&sup, &other)),
            }
        })
    }
}

struct WorkerAuth {
    sup: Supervisor,
    mode: Arc<str>,
}

impl Authenticator for WorkerAuth {
    fn authenticate(&self, request: AppRequest) -> BoxFuture<Result<AuthAnswer, PluginError>> {
        let sup = self.sup.clone();
        let mode = self.mode.clone();
        let head = HttpHead::of(&request);
        Box::pin(async move {
            let request = Request::Authenticate {
                mode: mode.to_string(),
                head,
            };
            let judged = match sup.request(request, Subject::Auth(mode)).await? {
                Reply::Auth { result } => result?,
                other => return Err(out_of_protocol(&sup, &other)),
            };
            Ok(match judged {
                AuthWire::Accepted { subject } => AuthAnswer::Accepted { subject },
                AuthWire::Refused {
                    status,
                    headers,
                    body,
                } => {
                    let (tx, rx) = tokio::sync::mpsc::channel(1);
                    let _ = tx.try_send(Ok(body.0));
                    AuthAnswer::Refused(AppResponse {
                        status,
                        headers: headers.into_iter().map(|(k, v)| (k.0, v.0)).collect(),
                        body: rx,
                    })
                }
            })
        })
    }
}

struct WorkerSink {
    sup: Supervisor,
    owner: String,
    index: usize,
}

impl WorkerSink {
    fn tell(&self, call: ObservedWire) {
        let request = Request::Observe {
            index: self.index,
            call,
        };
        match self.sup.request_blocking(request, SINK_LIMIT, "its sink") {
            Ok(Reply::Delivered) => {}
            Ok(other) => tracing::warn!("{}", out_of_protocol(&self.sup, &other)),
            Err(e) => tracing::warn!(
                "the sink of plugin '{}' was not told of a call: {e}",
                self.sup.key()
            ),
        }
    }
}

impl CallObserver for WorkerSink {
    fn owner(&self) -> &str {
        &self.owner
    }

    fn tool_call(&self, call: &ObservedToolCall<'_>) {
        self.tell(ObservedWire::of_tool(call));
    }

    fn model_call(&self, call: &ObservedModelCall<'_>) {
        self.tell(ObservedWire::of_model(call));
    }
}
