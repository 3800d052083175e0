//! The one firing function of the bus: a lane's callbacks in order, each
//! isolated, their answers kept by the lane's policy.

use std::mem::Discriminant;
use std::time::{Duration, Instant};

use crate::core::hooks::{
    ActionKind, FailMode, HookAction, HookEntry, HookError, HookEvent, HookPayload, HookReturn,
    HookSpec, LoopDecision, Policy,
};
use crate::core::outcome::PluginError;
use crate::core::registry::Registry;

/// The [`LoopDecision`]s among `answers`; a decision the point cannot act
/// on is logged and dropped by the caller's match.
pub fn decisions(answers: Vec<HookAction>, event: HookEvent) -> Vec<LoopDecision> {
    answers
        .into_iter()
        .filter_map(|a| match a {
            HookAction::Decide(d) => Some(d),
            other => {
                tracing::warn!("{event}: ignored an answer it cannot act on: {other:?}");
                None
            }
        })
        .collect()
}

/// Fire `entries` for `event`, in order, each isolated, and return the
/// answers that count under the event's [policy](crate::core::hooks::HookSpec):
/// none for an observer, at most one for first-wins, all for collect, the
/// last for chain. A tool event skips the callbacks that declared other
/// tools ([`HookEntry::is_for_tool`]). A callback that raises, answers a shape the event does
/// not accept, or overruns the `budget` is logged and counted, never
/// propagated. This is the one firing function of the bus; dialects only
/// translate calls and answers.
pub async fn fire_entries(
    entries: &[HookEntry],
    event: HookEvent,
    payload: HookPayload<'_>,
    budget: Option<Duration>,
) -> Vec<HookAction> {
    fire_entries_from(entries, event, payload, budget)
        .await
        .into_iter()
        .map(|(_, action)| action)
        .collect()
}

/// [`fire_entries`], each answer with the index of the entry that gave it
/// (an audit row names the hook that blocked a call).
pub async fn fire_entries_from(
    entries: &[HookEntry],
    event: HookEvent,
    mut payload: HookPayload<'_>,
    budget: Option<Duration>,
) -> Vec<(usize, HookAction)> {
    let spec = event.spec();
    payload.set_stage(event);
    let mut answers = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        // A callback that declared its tools is not called for another's.
        if let HookPayload::Tool(ctx) = &payload {
            if !entry.is_for_tool(&ctx.tool_name) {
                continue;
            }
        }
        entry
            .stats
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let started = budget.map(|_| coarse_now());
        let answer = match (entry.callback.call(event, payload.reborrow()), budget) {
            (HookReturn::Ready(r), None) => r,
            (HookReturn::Ready(r), Some(limit)) => {
                if started.is_some_and(|s| coarse_now().saturating_sub(s) > limit) {
                    Err(HookError::Overran(limit))
                } else {
                    r
                }
            }
            (HookReturn::Pending(fut), None) => fut.await,
            (HookReturn::Pending(fut), Some(limit)) => tokio::time::timeout(limit, fut)
                .await
                .unwrap_or(Err(HookError::TimedOut(limit))),
        };
        let answer = match answer {
            Ok(action) if action.kind().is_some_and(|k| !spec.accepts.contains(&k)) => Err(
                HookError::WrongShape(format!("{action:?}"), entry.event_shown(event)),
            ),
            other => other,
        };
        let action = match answer {
            Ok(HookAction::Continue) => continue,
            // An edit of a loop point's context: applied now, so the next
            // callback sees it; not an answer under the policy.
            Ok(HookAction::Decide(crate::core::hooks::LoopDecision::Edit(edit))) => {
                if let HookPayload::Loop(ctx) = &mut payload {
                    edit.apply(ctx);
                }
                continue;
            }
            Ok(action) => action,
            Err(err) => {
                report_hook_error(entry, event, &err);
                record_turn_error(entry, event, &err);
                // A fail-closed row, guard or lane takes any failure
                // (raised, wrong shape, timed out, not run) as a refusal.
                if answers.is_empty() {
                    if let Some(refusal) = failed_closed(entry, event, &err) {
                        answers.push((index, refusal));
                    }
                }
                continue;
            }
        };
        match spec.policy {
            Policy::Observe => {} // it accepts no answer: refused above
            Policy::FirstWins => {
                if answers.is_empty() {
                    answers.push((index, action));
                }
            }
            Policy::Collect => answers.push((index, action)),
            Policy::Merge => merge(&mut answers, index, action),
            Policy::StopAtFirst => {
                answers.push((index, action));
                break;
            }
            Policy::Veto => veto(&mut answers, index, action),
            Policy::FirstOfEach => first_of_each(&mut answers, index, action),
            Policy::Chain => {
                if let (HookAction::Replace(text), HookPayload::Tool(ctx)) = (&action, &mut payload)
                {
                    ctx.result = Some(text.clone());
                    ctx.revision += 1;
                }
                answers.clear();
                answers.push((index, action));
            }
        }
    }
    answers
}

/// A merge lane's fold: patches ([`LoopDecision::Merge`]) join the first
/// one, field by field, a later one winning; other answers are kept in
/// order.
fn merge(answers: &mut Vec<(usize, HookAction)>, index: usize, action: HookAction) {
    let HookAction::Decide(LoopDecision::Merge(later)) = action else {
        return answers.push((index, action));
    };
    let earlier = answers.iter_mut().find_map(|(_, a)| match a {
        HookAction::Decide(LoopDecision::Merge(p)) => Some(p),
        _ => None,
    });
    match earlier {
        Some(patch) => *patch = std::mem::take(patch).then(later),
        None => answers.push((index, HookAction::Decide(LoopDecision::Merge(later)))),
    }
}

/// A veto lane's fold: refusals only; the first, unless an abort of the
/// turn comes later, which outranks it.
fn veto(answers: &mut Vec<(usize, HookAction)>, index: usize, action: HookAction) {
    let aborts = |a: &HookAction| matches!(a, HookAction::Decide(LoopDecision::AbortTurn { .. }));
    let refuses = aborts(&action)
        || matches!(
            action,
            HookAction::Block(_) | HookAction::Decide(LoopDecision::Refuse { .. })
        );
    if !refuses {
        return;
    }
    match answers.first() {
        None => answers.push((index, action)),
        Some((_, first)) if aborts(&action) && !aborts(first) => answers[0] = (index, action),
        Some(_) => {}
    }
}

/// A first-of-each lane's fold: the first answer of each kind, and every
/// append.
fn first_of_each(answers: &mut Vec<(usize, HookAction)>, index: usize, action: HookAction) {
    fn kind(a: &HookAction) -> (Discriminant<HookAction>, Option<Discriminant<LoopDecision>>) {
        let decision = match a {
            HookAction::Decide(d) => Some(std::mem::discriminant(d)),
            _ => None,
        };
        (std::mem::discriminant(a), decision)
    }
    let appends = matches!(action, HookAction::Decide(LoopDecision::Append(_)));
    if appends || !answers.iter().any(|(_, a)| kind(a) == kind(&action)) {
        answers.push((index, action));
    }
}

/// The monotonic clock to a few milliseconds (`CLOCK_MONOTONIC_COARSE`):
/// enough to tell a sync hook that overran a budget of seconds, read on
/// every hook call at a fraction of a precise reading's cost.
fn coarse_now() -> Duration {
    #[cfg(target_os = "linux")]
    {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid timespec for the call to fill; the clock
        // id is a constant every Linux since 2.6.32 knows.
        if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) } == 0 {
            return Duration::new(now.tv_sec as u64, now.tv_nsec as u32);
        }
    }
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed()
}

/// The refusal a callback that failed on `event` stands for, if it fails
/// closed: by its dialect's row ([`EventRow::on_error`](crate::core::hooks::EventRow::on_error)), as a guard
/// plugin ([`HookCallback::fail_closed`](crate::core::hooks::HookCallback::fail_closed)), or by the lane's row.
fn failed_closed(entry: &HookEntry, event: HookEvent, err: &HookError) -> Option<HookAction> {
    let spec = event.spec();
    if let Some(row) = entry
        .callback
        .row()
        .filter(|r| r.on_error == FailMode::Closed)
    {
        return refusal(spec, (row.refused)(&entry.label, err));
    }
    entry.callback.fail_closed(event, err).or_else(|| {
        (spec.on_error == FailMode::Closed)
            .then(|| {
                let reason = format!(
                    "hook {} of plugin '{}' failed: {err}",
                    entry.label, entry.owner
                );
                refusal(spec, reason)
            })
            .flatten()
    })
}

/// The refusal a lane takes, with `reason`: the refusing answer its row
/// accepts (a block of the call, a skip of the message); `None` for a lane
/// that refuses nothing.
pub fn refusal(spec: &HookSpec, reason: String) -> Option<HookAction> {
    if spec.accepts.contains(&ActionKind::Block) {
        Some(HookAction::Block(reason))
    } else if spec.accepts.contains(&ActionKind::Skip) {
        Some(HookAction::Skip(reason))
    } else {
        None
    }
}

/// Add a failed hook call to the current turn's `hook_errors` (when a turn
/// is running: see [`crate::core::hooks::CURRENT_TURN`]).
fn record_turn_error(entry: &HookEntry, event: HookEvent, err: &HookError) {
    let Some(turn) = crate::core::hooks::current_turn() else {
        return;
    };
    let error = match err {
        HookError::Raised(p) => p.described(),
        other => other.to_string(),
    };
    let record = crate::core::hooks::HookErrorRecord {
        plugin: entry.owner.clone(),
        dialect: String::new(),
        event: entry.event_shown(event),
        handler: entry.label.clone(),
        error,
    };
    turn.hook_errors
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(record);
}

fn report_hook_error(entry: &HookEntry, event: HookEvent, err: &HookError) {
    let first_of_kind = entry.stats.count(err);
    let line = format!(
        "hook {} callback {} of plugin '{}' failed: {}",
        entry.event_shown(event),
        entry.label,
        entry.owner,
        err
    );
    if first_of_kind || !matches!(err, HookError::WrongShape(..)) {
        tracing::warn!("{line}");
    } else {
        tracing::debug!("{line}");
    }
    if let HookError::Raised(PluginError {
        traceback: Some(tb),
        ..
    }) = err
    {
        tracing::info!(
            "traceback of hook {} of plugin '{}':\n{}",
            entry.label,
            entry.owner,
            tb.trim_end()
        );
    }
}

/// Fire `event` with `payload` under its policy; the answers that count.
pub async fn fire(
    registry: &Registry,
    event: HookEvent,
    payload: HookPayload<'_>,
) -> Vec<HookAction> {
    let entries = registry.hooks().entries(event);
    if entries.is_empty() {
        return Vec::new();
    }
    fire_entries(entries, event, payload, registry.hook_timeout).await
}
