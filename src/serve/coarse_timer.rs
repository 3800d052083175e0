//! hyper's timer for `--header-timeout`, on a coarse tick.
//!
//! hyper arms the header time-out for every request head it waits for (an
//! idle keep-alive connection's included) and drops it once the head is
//! read. On tokio's timer each arming is an entry in the timer wheel, and
//! one earlier than the wheel's next deadline wakes the parked thread that
//! drives it: at one client, about one wake-up of another thread every
//! other request (`perf record -e sched:sched_wakeup`, issue 26). This
//! timer arms a deadline with an allocation and, once per sleep, a push on
//! a list; one task looks at the list every tick and wakes what is due. A
//! time-out fires no earlier than its deadline and at most a tick late.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;

/// A [`hyper::rt::Timer`] whose sleeps are woken by one ticking task.
#[derive(Clone)]
pub struct CoarseTimer {
    shared: Arc<Shared>,
}

struct Shared {
    /// The sleeps polled at least once and not yet fired; a dropped one
    /// leaves a dead `Weak` that the next tick removes.
    armed: Mutex<Vec<Weak<Slot>>>,
}

struct Slot {
    deadline: Instant,
    fired: AtomicBool,
    armed: AtomicBool,
    waker: AtomicWaker,
}

/// The future [`CoarseTimer`] hands to hyper.
pub struct CoarseSleep {
    slot: Arc<Slot>,
    shared: Arc<Shared>,
}

impl CoarseTimer {
    /// A timer looking at its sleeps every `tick`, with the task that does
    /// so spawned on the current runtime. The task ends once the timer and
    /// every clone of it are dropped.
    pub fn spawn(tick: Duration) -> Self {
        let shared = Arc::new(Shared {
            armed: Mutex::new(Vec::new()),
        });
        let weak = Arc::downgrade(&shared);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(tick);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(shared) = weak.upgrade() else { break };
                shared.wake_due(Instant::now());
            }
        });
        CoarseTimer { shared }
    }

    /// The tick for a time-out of `limit`: an eighth of it, between 10 ms
    /// and 1 s (10 s, the default, is looked at every second).
    pub fn tick_for(limit: Duration) -> Duration {
        (limit / 8).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

impl Shared {
    fn wake_due(&self, now: Instant) {
        let mut due = Vec::new();
        {
            let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
            armed.retain(|weak| match weak.upgrade() {
                Some(slot) if slot.deadline <= now => {
                    due.push(slot);
                    false
                }
                Some(_) => true,
                None => false,
            });
        }
        // Woken outside the lock: a woken task may arm another sleep.
        for slot in due {
            slot.fired.store(true, Ordering::Release);
            slot.waker.wake();
        }
    }
}

impl hyper::rt::Timer for CoarseTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(CoarseSleep {
            slot: Arc::new(Slot {
                deadline,
                fired: AtomicBool::new(false),
                armed: AtomicBool::new(false),
                waker: AtomicWaker::new(),
            }),
            shared: self.shared.clone(),
        })
    }
}

impl Future for CoarseSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let slot = &self.slot;
        if slot.fired.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        slot.waker.register(cx.waker());
        if !slot.armed.swap(true, Ordering::AcqRel) {
            self.shared
                .armed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Arc::downgrade(slot));
        }
        // Fired between the first look and the registration.
        if slot.fired.load(Ordering::Acquire) || Instant::now() >= slot.deadline {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl hyper::rt::Sleep for CoarseSleep {}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Timer;

    #[tokio::test]
    async fn a_sleep_fires_after_its_deadline_and_a_dropped_one_is_forgotten() {
        let tick = Duration::from_millis(10);
        let timer = CoarseTimer::spawn(tick);
        let started = Instant::now();
        timer.sleep(Duration::from_millis(60)).await;
        assert!(started.elapsed() >= Duration::from_millis(60));

        // A sleep dropped before its deadline leaves nothing armed once a
        // tick has looked (hyper drops one per request head read).
        let mut dropped = timer.sleep(Duration::from_secs(3600));
        let waker = futures_util::task::noop_waker();
        assert!(dropped
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        assert_eq!(timer.shared.armed.lock().unwrap().len(), 1);
        drop(dropped);
        let before = Instant::now();
        while !timer.shared.armed.lock().unwrap().is_empty() {
            assert!(
                before.elapsed() < Duration::from_secs(30),
                "never forgotten"
            );
            tokio::time::sleep(tick).await;
        }
    }

    #[tokio::test]
    async fn the_ticking_task_ends_with_the_timer() {
        let timer = CoarseTimer::spawn(Duration::from_millis(10));
        let shared = Arc::downgrade(&timer.shared);
        drop(timer);
        assert!(shared.upgrade().is_none());
    }

    #[test]
    fn the_tick_is_an_eighth_of_the_limit_within_bounds() {
        assert_eq!(
            CoarseTimer::tick_for(Duration::from_secs(10)),
            Duration::from_secs(1)
        );
        assert_eq!(
            CoarseTimer::tick_for(Duration::from_millis(400)),
            Duration::from_millis(50)
        );
        assert_eq!(
            CoarseTimer::tick_for(Duration::from_millis(1)),
            Duration::from_millis(10)
        );
    }
}
