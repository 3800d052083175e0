//! `delegate` sub-agents: a turn of their own over the same host,
//! between `subagent_start` and `subagent_stop`.

use std::sync::Arc;

use super::tools::SubagentRunner;
use super::{Inbound, Inner};
use crate::core::hooks::{BoxFuture, HookEvent, SubagentStopContext};
use crate::core::loop_points as points;

impl SubagentRunner for Inner {
    fn run(
        &self,
        parent_session: String,
        task: String,
        tools: Option<Vec<String>>,
    ) -> BoxFuture<Result<String, String>> {
        // The loop runs on an `Arc<Inner>`; a sub-agent gets its own, over the
        // same host, provider and config, with its own session store.
        let inner = Arc::new(Inner {
            host: self.host.clone(),
            provider: self.provider.clone(),
            // Sub-agent sessions live where the parent's do.
            sessions: self.sessions.sibling(),
            config: self.config.clone(),
            subagents: Default::default(),
            tool_defs: Default::default(),
        });
        // A fresh transcript for every call, unique across processes sharing
        // the home: a new process never resumes an old sub-agent conversation.
        let from = self.subagents.load(std::sync::atomic::Ordering::Relaxed) + 1;
        let claimed = self.sessions.claim_subagent_key(&parent_session, from);
        if let Ok((_, n)) = &claimed {
            self.subagents
                .fetch_max(*n, std::sync::atomic::Ordering::Relaxed);
        }
        let allowed: Vec<String> = tools
            .unwrap_or_else(|| self.config.subagent_tools.clone())
            .into_iter()
            .filter(|t| t != "delegate")
            .collect();
        Box::pin(async move {
            let key = match claimed {
                Ok((key, _)) => key,
                Err(e) => {
                    return Err(format!(
                        "cannot start a sub-agent: cannot create its transcript in {}: {e}",
                        inner.sessions.dir().display()
                    ))
                }
            };
            let registry = inner.host.registry();
            let start = || SubagentStopContext {
                session_id: parent_session.clone(),
                subagent_id: key.clone(),
                goal: task.clone(),
                ..Default::default()
            };
            points::observe(&registry, HookEvent::SubagentBegun, start).await;
            let goal = task.clone();
            let inbound = Inbound {
                content: task,
                channel: "delegate".into(),
                sender_id: parent_session.clone(),
                session_key: key.clone(),
                ..Default::default()
            };
            let report = inner
                .clone()
                .handle(inbound, None, Some(allowed), std::future::pending())
                .await;
            let reason = if report.error.is_some() {
                "error"
            } else if report.hit_iteration_cap {
                "max_iterations"
            } else {
                "completed"
            };
            let stop = || SubagentStopContext {
                session_id: parent_session,
                subagent_id: key,
                reason: reason.into(),
                goal,
                ..Default::default()
            };
            points::observe(&inner.host.registry(), HookEvent::SubagentDone, stop).await;
            match report.error {
                Some(e) => Err(format!("the sub-agent failed: {e}")),
                None => Ok(report.reply.unwrap_or_default()),
            }
        })
    }
}
