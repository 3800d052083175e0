//! Once per cluster: each tick of a scheduled task is claimed by a row
//! `(task, tick)`; the replica whose insert wins runs it, the others skip
//! it. Ticks are numbered from the Unix epoch in periods of the task, so
//! every replica counts the same ticks and a dead replica's next tick is
//! simply claimed by a live one: a claim is a lease of one tick.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::db::DbError;
use super::Cluster;

/// The number of the tick `now` falls in, for a task run every `period`.
pub fn tick_of(now: SystemTime, period: Duration) -> i64 {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    (since.as_millis() / period.as_millis().max(1)) as i64
}

/// How long until the next tick boundary of `period` after `now`.
pub fn until_next_tick(now: SystemTime, period: Duration) -> Duration {
    let since = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let p = period.as_millis().max(1);
    Duration::from_millis((p - since % p) as u64)
}

impl Cluster {
    /// Claim tick `tick` of `task` for this replica: `true` when it is
    /// ours to run. Claims older than a day are pruned on the way.
    pub async fn claim_tick(&self, task: &str, tick: i64) -> Result<bool, DbError> {
        let (t, o) = (task.to_string(), self.replica().to_string());
        self.db()
            .run(move |c| async move {
                let won = c
                    .query_opt(
                        "INSERT INTO plughost_cron_ticks (task, tick, owner) VALUES ($1, $2, $3) \
                         ON CONFLICT DO NOTHING RETURNING owner",
                        &[&t, &tick, &o],
                    )
                    .await?;
                if won.is_some() && tick % 64 == 0 {
                    c.execute(
                        "DELETE FROM plughost_cron_ticks WHERE claimed_at < now() - interval '1 day'",
                        &[],
                    )
                    .await?;
                }
                Ok(won.is_some())
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_count_periods_from_the_epoch() {
        let at = UNIX_EPOCH + Duration::from_millis(10_250);
        assert_eq!(tick_of(at, Duration::from_secs(1)), 10);
        assert_eq!(
            until_next_tick(at, Duration::from_secs(1)),
            Duration::from_millis(750)
        );
    }
}
