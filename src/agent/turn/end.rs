//! The end of a turn: `on_session_end` and P13 after its work finished,
//! or after it was cancelled (bounded, so a cancelled turn always ends).

use std::sync::Arc;

use crate::agent::session::Session;
use crate::agent::{Inner, TurnReport, END_HOOK_BOUND};
use crate::core::hooks::{EndedBy, HookEvent, LoopContext, TurnScope};
use crate::core::loop_points as points;
use crate::core::outcome::ToolOutcome;

impl Inner {
    /// The end of a turn whose work finished: `on_session_end`, then P13.
    pub(in crate::agent) async fn end_completed(
        &self,
        outcome: Result<(), String>,
        session: &Session,
        report: &mut TurnReport,
        (turn, delegate): (&Arc<TurnScope>, bool),
    ) {
        report.completed = outcome.is_ok();
        if let Err(e) = outcome {
            report.reply = Some(format!("Error: {e}"));
            report.error = Some(e);
            report.ended_by = EndedBy::Error;
        }
        self.fire_session(HookEvent::TurnClosed, session, report.completed, false)
            .await;
        self.fire_turn_ended(&session.key, delegate, turn, report)
            .await;
    }

    /// The end of a cancelled turn: its futures are dropped (its async
    /// tools cancelled); its open calls get the result a cancelled call
    /// gets, so the session's next request is valid; then the end events,
    /// bounded.
    pub(in crate::agent) async fn end_interrupted(
        &self,
        session: &mut Session,
        report: &mut TurnReport,
        (turn, delegate): (&Arc<TurnScope>, bool),
    ) {
        let registry = self.host.registry();
        let renderer = registry.renderer();
        let text = |tool: &str| renderer.render(tool, &ToolOutcome::Cancelled);
        if let Err(e) = session.close_open_calls(&text) {
            tracing::warn!(
                "session '{}': cannot record the cancelled tool calls: {e} (the next turn repairs the transcript)",
                session.key
            );
        }
        self.fire_session_end_interrupted(session).await;
        report.ended_by = EndedBy::Interrupted;
        let bounded = self.fire_turn_ended(&session.key, delegate, turn, report);
        if tokio::time::timeout(END_HOOK_BOUND, bounded).await.is_err() {
            tracing::warn!("session '{}': turn_ended after a cancelled turn did not finish within {} s; stopped waiting", session.key, END_HOOK_BOUND.as_secs());
        }
    }

    /// `on_session_end(completed=False, interrupted=True)` after a cancel.
    /// Each async hook is bounded by the host's hook timeout; a host without
    /// one gets [`END_HOOK_BOUND`] for the whole event, so a cancelled turn
    /// always ends.
    async fn fire_session_end_interrupted(&self, session: &Session) {
        let fire = self.fire_session(HookEvent::TurnClosed, session, false, true);
        if self.host.registry().hook_timeout.is_some() {
            fire.await;
        } else if tokio::time::timeout(END_HOOK_BOUND, fire).await.is_err() {
            tracing::warn!(
                "session '{}': on_session_end after a cancelled turn did not finish within {} s; stopped waiting",
                session.key,
                END_HOOK_BOUND.as_secs()
            );
        }
    }

    /// P13: the turn ended (its report says how).
    async fn fire_turn_ended(
        &self,
        session_id: &str,
        delegate: bool,
        turn: &Arc<TurnScope>,
        report: &TurnReport,
    ) {
        let registry = self.host.registry();
        points::observe(&registry, HookEvent::TurnEnded, || LoopContext {
            ended_by: report.ended_by,
            reason: report.aborted.clone(),
            error: report.error.clone(),
            text: report.reply.clone().unwrap_or_default(),
            iteration: report.iterations,
            ..self.loop_context(session_id, delegate, turn)
        })
        .await;
    }
}
