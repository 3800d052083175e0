//! Where a session's transcript lives when it is not the file under
//! `<home>/sessions/` (the embedded default, kept in [`super::Session`] itself):
//! a store every replica of a cluster shares ([`super::pg::PgSessions`]).
//!
//! The calls are synchronous like the file store's: a message is stored
//! before [`super::Session::append`] returns, so a crash loses at most the
//! message in flight, whatever the store.

use std::time::Duration;

use serde_json::Value;

use super::SessionError;

/// A future borrowing the store.
pub type Held<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<TurnHold, SessionError>> + Send + 'a>,
>;

/// A session as a store holds it.
#[derive(Debug, Default)]
pub struct Stored {
    /// The messages as written (JSON text, in order).
    pub lines: Vec<String>,
    /// `on_session_start` has fired for it (on some replica).
    pub started: bool,
    /// Where its last message is (what [`SessionBackend::load_after`]
    /// continues from); 0 when it has none.
    pub last: i64,
    /// The dialects' per-session state as last stored (a JSON object by
    /// dialect, as text), if any.
    pub state: Option<String>,
}

/// What a turn holds while it runs; dropping it ends the hold (and, for a
/// store with turns, marks the turn's messages complete).
pub type TurnHold = Box<dyn Send>;

/// A shared session store: transcripts, the "session started" fact, the
/// results of compaction and repairs, and the cluster-wide hold of a turn.
pub trait SessionBackend: Send + Sync {
    /// Where it is, for messages (no credentials).
    fn describe(&self) -> String;
    /// The session of `key` as stored; the messages of a turn that never
    /// completed (its replica died) are not part of it.
    fn load(&self, key: &str) -> std::io::Result<Stored>;
    /// What was stored after the message at `after` (the last one this
    /// replica has), so a turn reads only what is new; `None` when that
    /// message is no longer part of the transcript (compacted, archived, or
    /// its turn dropped), and the whole transcript must be read again.
    /// `lines` holds only the new messages.
    fn load_after(&self, key: &str, after: i64) -> std::io::Result<Option<Stored>>;
    /// Store one message (`line`, JSON text) at the end of `key`'s
    /// transcript, as part of the turn holding it; returns where it is, or
    /// `None` when the store holds it back to store it with the rest of
    /// the turn when the turn's hold ends (where it went is then told by
    /// [`take_flushed`](Self::take_flushed)).
    fn append(&self, key: &str, line: &str) -> std::io::Result<Option<i64>>;
    /// Where the last message a turn held back was stored, once, after
    /// the turn's end: `Some(Some(seq))`, `Some(None)` when storing failed
    /// (the transcript must be read again), `None` when nothing was held
    /// back since the last call.
    fn take_flushed(&self, _key: &str) -> Option<Option<i64>> {
        None
    }
    /// Whether, by what the turn now holding `key` learned when it took
    /// the session, nobody has written it since this process's last turn
    /// stored it: the turn then reads nothing. Asked once a turn (the
    /// answer is taken); `false` when the store cannot tell.
    fn unchanged_since_last_turn(&self, _key: &str) -> bool {
        false
    }
    /// Replace `key`'s transcript with `messages` (compaction, repairs);
    /// `aside` (JSON text) is kept beside, out of the transcript. Returns
    /// where the last new message is.
    fn replace(&self, key: &str, messages: &[Value], aside: &[String]) -> std::io::Result<i64>;
    /// Store the dialects' per-session state (`state`, JSON text) of
    /// `key`, as part of the turn holding it.
    fn save_state(&self, key: &str, state: &str) -> std::io::Result<()>;
    /// Take `key` for a new session if no session has used it (a
    /// sub-agent's fresh conversation): `false` when it is taken.
    fn claim(&self, key: &str) -> std::io::Result<bool>;
    /// Start `key` over; its old messages are kept, archived.
    fn archive(&self, key: &str) -> std::io::Result<()>;
    /// Hold `key` for one turn, cluster-wide, waiting at most `wait`.
    fn hold<'a>(&'a self, key: &'a str, wait: Duration) -> Held<'a>;
    /// Every session key it holds.
    fn keys(&self) -> std::io::Result<Vec<String>>;
    /// Store a session written elsewhere (`plughost sessions move`), with
    /// its dialect state if it has one: `false` when `key` exists here
    /// already (nothing is written then).
    fn import(&self, key: &str, lines: &[String], state: Option<&str>) -> std::io::Result<bool>;
}
