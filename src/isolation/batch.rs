//! One round trip for an isolated tool call and its plugin's own hooks
//! (issue 26 item 5).
//!
//! Without this, a call of an isolated plugin's tool with that plugin's
//! `pre_tool_call`, `post_tool_call` and `transform_tool_result` hooks is
//! four requests to its worker, one after the other. Now, before the
//! call's first hook, the pipeline shows the tool's handler the registry
//! ([`ToolHandler::prepare`](crate::core::registry::ToolHandler::prepare)):
//! the proxy finds the steps of the call, in the pipeline's order, that
//! are its plugin's and follow each other with nothing of anybody else's
//! between them (a [`Plan`]), and the first of them sends them all in one
//! [`Request::Batch`]. The worker runs them on one context and answers
//! each step as it is done; each proxy (hook or tool) then takes its own
//! answer instead of sending a request.
//!
//! Nothing about the hooks changes: plughost still fires every hook
//! itself, in order, under each event's policy (first block wins, errors
//! logged and counted, fail-closed guards, time limits per hook, another
//! plugin's hooks where they are), only the answers of the planned steps
//! are already on their way. Anything of another plugin between two steps
//! (its hook, a loop-point lane, a wrapper or middleware around the
//! handler, a `check_fn` still unknown or present, an unset
//! `requires_env`) ends the plan there: the steps outside it go one
//! request each, as before. The worker goes on past a step only where
//! plughost certainly goes on the same way (see
//! `worker_batch`); where plughost then goes on all the same (a
//! raised `pre_tool_call` hook of a fail-open event), the rest of the
//! call goes one request per step.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::protocol::{Reply, Request, Step, ToolCallWire};
use super::supervisor::{Stream, Subject, Supervisor};
use crate::core::hooks::{HookEntry, HookEvent, Point, ToolCallContext};
use crate::core::outcome::{PluginError, PluginFault};
use crate::core::registry::{Registry, Tool};

/// The hook callbacks of one isolated plugin, by the address of their
/// proxy, with the index its worker knows each by: how a plan tells its
/// plugin's entries of the registry from other plugins'.
#[derive(Default)]
pub struct HookTable(Mutex<Vec<(usize, usize)>>);

impl HookTable {
    pub(crate) fn add(&self, callback: &Arc<dyn crate::core::hooks::HookCallback>, index: usize) {
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        list.push((address(callback), index));
    }

    fn index_of(&self, entry: &HookEntry) -> Option<usize> {
        let list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let at = address(&entry.callback);
        list.iter().find(|(a, _)| *a == at).map(|(_, i)| *i)
    }
}

fn address(callback: &Arc<dyn crate::core::hooks::HookCallback>) -> usize {
    Arc::as_ptr(callback) as *const () as usize
}

/// The steps of one call that go to the worker in one request.
pub struct Plan {
    sup: Supervisor,
    tool: Arc<str>,
    steps: Vec<Step>,
    /// The next step to be taken.
    next: AtomicUsize,
    stream: Mutex<Option<Arc<Stream>>>,
    /// The plan is off (its request could not be sent, or the call went
    /// another way): the rest of the call goes one request per step.
    off: AtomicBool,
}

/// What a proxy does with its step.
pub enum Claim {
    /// Take the planned answer; `Some`: first send the batch.
    Planned(Option<Box<Request>>),
    /// Send its own request.
    Own,
}

impl Plan {
    /// Whether `sup` runs this plan.
    pub fn is_of(&self, sup: &Supervisor) -> bool {
        self.sup.same(sup)
    }

    /// Claim `step` for its proxy; `call` makes the batch's context when
    /// `step` is the first.
    pub fn claim(&self, step: &Step, call: impl FnOnce() -> ToolCallWire) -> Claim {
        if self.off.load(Ordering::Acquire) {
            return Claim::Own;
        }
        let started = self.stream().is_some();
        if started && self.stream().is_some_and(|s| s.is_finished()) {
            return Claim::Own;
        }
        let at = self.next.load(Ordering::Acquire);
        match self.steps.get(at) {
            Some(planned) if planned == step => {
                self.next.store(at + 1, Ordering::Release);
                Claim::Planned((at == 0).then(|| {
                    Box::new(Request::Batch {
                        tool: self.tool.to_string(),
                        call: call(),
                        steps: self.steps.clone(),
                    })
                }))
            }
            // Not yet at the plan's first step (one of its plugin's steps
            // before another plugin's), or past its end.
            _ if at == 0 || at >= self.steps.len() => Claim::Own,
            _ => {
                // The call went another way than planned: the worker's
                // answers are not for it (dropping the stream stops a
                // worker still running them).
                tracing::warn!(
                    "a call of tool '{}' of plugin '{}' left the plan of its hooks at step {at}",
                    self.tool,
                    self.sup.key()
                );
                self.off.store(true, Ordering::Release);
                self.stream.lock().unwrap_or_else(|e| e.into_inner()).take();
                Claim::Own
            }
        }
    }

    fn stream(&self) -> Option<Arc<Stream>> {
        self.stream
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The worker's answer to a claimed step (`first`: send the batch).
    pub async fn take(
        &self,
        first: Option<Box<Request>>,
        what: Subject,
    ) -> Result<Reply, PluginError> {
        let stream = match first {
            Some(request) => match self.sup.stream(*request) {
                Ok(stream) => {
                    let stream = Arc::new(stream);
                    *self.stream.lock().unwrap_or_else(|e| e.into_inner()) = Some(stream.clone());
                    stream
                }
                Err(e) => {
                    self.off.store(true, Ordering::Release);
                    return Err(e);
                }
            },
            None => self.stream().ok_or_else(|| self.lost())?,
        };
        stream.next(what).await.unwrap_or_else(|| Err(self.lost()))
    }

    fn lost(&self) -> PluginError {
        PluginError::fault(PluginFault::Unavailable {
            plugin: self.sup.key().to_string(),
            problem: "its worker sent no answer for a step of the call".into(),
        })
    }
}

/// The plan of a call of `tool` (named `name`) of the plugin `sup` runs,
/// whose hooks are `ours`: the run of consecutive steps around the tool
/// that are all the plugin's; `None` when that is the tool alone.
pub fn plan(
    sup: &Supervisor,
    name: &Arc<str>,
    tool: &Tool,
    registry: &Registry,
    ours: &HookTable,
) -> Option<Plan> {
    let unset = |v: &String| std::env::var_os(v).is_none_or(|x| x.is_empty());
    if tool.spec.requires_env.iter().any(unset) {
        return None; // the pipeline refuses the call before the tool runs
    }
    let hooks = registry.hooks();
    // Each step of the call in the pipeline's order: `None` for another's.
    let mut seq: Vec<Option<Step>> = Vec::new();
    let mine = |seq: &mut Vec<Option<Step>>, event: HookEvent| {
        for entry in hooks.entries(event).iter().filter(|e| e.is_for_tool(name)) {
            seq.push(ours.index_of(entry).map(|index| Step::Hook {
                event: event.name().to_string(),
                index,
            }));
        }
    };
    mine(&mut seq, HookEvent::ToolGuard);
    use crate::core::pipeline::middleware::{around_lane, edits_request};
    for (lane, _) in hooks.lanes_at(Point::ToolBefore) {
        if !matches!(lane, HookEvent::Lane(id) if edits_request(id.lane())) {
            seq.push(None);
        }
    }
    if !hooks.entries(HookEvent::ToolExecuting).is_empty()
        || !hooks
            .wrappers(&crate::core::wrappers::TOOL_HANDLER)
            .is_empty()
        || around_lane(hooks, Point::ToolAround).is_some()
    {
        seq.push(None);
    }
    let at = seq.len();
    seq.push(Some(Step::Tool));
    let terminal = hooks.entries(HookEvent::ExecOutputRewrite);
    if tool.terminal && terminal.iter().any(|e| e.is_for_tool(name)) {
        seq.push(None);
    }
    mine(&mut seq, HookEvent::ToolDone);
    mine(&mut seq, HookEvent::ResultRewrite);
    let start = seq[..at]
        .iter()
        .rposition(Option::is_none)
        .map_or(0, |p| p + 1);
    let end = seq[at..]
        .iter()
        .position(Option::is_none)
        .map_or(seq.len(), |p| at + p);
    let steps: Vec<Step> = seq[start..end].iter().flatten().cloned().collect();
    (steps.len() >= 2).then(|| Plan {
        sup: sup.clone(),
        tool: name.clone(),
        steps,
        next: AtomicUsize::new(0),
        stream: Mutex::new(None),
        off: AtomicBool::new(false),
    })
}

/// The plan on a call's context, if `sup` runs it.
pub fn of_call(ctx: &mut ToolCallContext, sup: &Supervisor) -> Option<Arc<Plan>> {
    ctx.dialect
        .get_mut::<super::proxy::IsolatedParams>()
        .and_then(|state| state.plan.clone())
        .filter(|p| p.is_of(sup))
}
