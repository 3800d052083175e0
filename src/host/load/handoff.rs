//! A sync hook of an in-process plugin called where the caller can walk
//! away from it: `--hook-timeout` bounds it even when it blocks in C
//! (`time.sleep(1000)`, a blocking read), which the watchdog's
//! `TimeoutError` alone cannot end (it is seen between two bytecodes).
//!
//! The call runs on the calling thread's runner
//! ([`crate::runtime::threads::call_abandonable`]) on a copy of its
//! context: the copy takes the context's dialect state along, and comes
//! back into the caller's context when the call returns. A call abandoned
//! at its deadline leaves the caller's context as it was before the call
//! (less the dialect's cache, rebuilt by the next hook) and is reported as
//! [`HookError::TimedOut`]; its thread is left blocked.

use std::sync::Arc;
use std::time::Duration;

use crate::core::hooks::{HookCallback, HookError, HookEvent, HookPayload, HookReturn};

/// A context moved off the caller's stack for the call.
enum Owned {
    Tool(Box<crate::core::contexts::ToolCallContext>),
    Llm(Box<crate::core::contexts::LlmCallContext>),
    Session(Box<crate::core::contexts::SessionContext>),
    Subagent(Box<crate::core::contexts::SubagentStopContext>),
    Gateway(Box<crate::core::contexts::GatewayContext>),
    Loop(Box<crate::core::contexts::LoopContext>),
}

/// A copy of `c` that takes its dialect state along.
fn copy<T: Clone>(
    c: &mut T,
    dialect: fn(&mut T) -> &mut crate::core::contexts::DialectState,
) -> Box<T> {
    let mut copy = Box::new(c.clone());
    *dialect(&mut copy) = std::mem::take(dialect(c));
    copy
}

impl Owned {
    fn copy_of(payload: &mut HookPayload<'_>) -> Owned {
        match payload {
            HookPayload::Tool(c) => Owned::Tool(copy(*c, |c| &mut c.dialect)),
            HookPayload::Llm(c) => Owned::Llm(copy(*c, |c| &mut c.dialect)),
            HookPayload::Session(c) => Owned::Session(copy(*c, |c| &mut c.dialect)),
            HookPayload::Subagent(c) => Owned::Subagent(copy(*c, |c| &mut c.dialect)),
            HookPayload::Gateway(c) => Owned::Gateway(copy(*c, |c| &mut c.dialect)),
            HookPayload::Loop(c) => Owned::Loop(copy(*c, |c| &mut c.dialect)),
        }
    }

    fn payload(&mut self) -> HookPayload<'_> {
        match self {
            Owned::Tool(c) => HookPayload::Tool(c),
            Owned::Llm(c) => HookPayload::Llm(c),
            Owned::Session(c) => HookPayload::Session(c),
            Owned::Subagent(c) => HookPayload::Subagent(c),
            Owned::Gateway(c) => HookPayload::Gateway(c),
            Owned::Loop(c) => HookPayload::Loop(c),
        }
    }

    /// Put the context as the call left it back into the caller's.
    fn restore(self, payload: &mut HookPayload<'_>) {
        match (self, payload) {
            (Owned::Tool(o), HookPayload::Tool(c)) => **c = *o,
            (Owned::Llm(o), HookPayload::Llm(c)) => **c = *o,
            (Owned::Session(o), HookPayload::Session(c)) => **c = *o,
            (Owned::Subagent(o), HookPayload::Subagent(c)) => **c = *o,
            (Owned::Gateway(o), HookPayload::Gateway(c)) => **c = *o,
            (Owned::Loop(o), HookPayload::Loop(c)) => **c = *o,
            // `copy_of` made the same variant.
            _ => {}
        }
    }
}

/// Call `call` (the wrapped callback, journaled when its plugin is) on
/// the runner, bounded by `limit`; see the module docs. `abandoned` runs
/// when the call is left behind.
pub(super) fn call_bounded(
    limit: Duration,
    event: HookEvent,
    mut payload: HookPayload<'_>,
    call: Arc<dyn HookCallback>,
    abandoned: impl FnOnce(),
) -> HookReturn {
    let mut owned = Owned::copy_of(&mut payload);
    let runtime = tokio::runtime::Handle::try_current().ok();
    let turn = crate::core::hooks::current_turn();
    let done = crate::runtime::threads::call_abandonable(limit, move || {
        // The caller's runtime and turn, as an inline call would see them.
        let _entered = runtime.as_ref().map(|r| r.enter());
        let ret = match turn {
            Some(turn) => crate::core::hooks::CURRENT_TURN
                .sync_scope(turn, || call.call(event, owned.payload())),
            None => call.call(event, owned.payload()),
        };
        (owned, ret)
    });
    match done {
        Some((owned, ret)) => {
            owned.restore(&mut payload);
            ret
        }
        None => {
            abandoned();
            HookReturn::Ready(Err(HookError::TimedOut(limit)))
        }
    }
}

/// Whether a call may be handed off: the caller does not hold the GIL
/// (the runner would wait for it) and a runner can exist.
pub(super) fn may_hand_off() -> bool {
    !crate::runtime::threads::holds_gil()
}
