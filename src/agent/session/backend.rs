//! Where a session's transcript lives when it is not the file under
//! `<home>/sessions/` (the embedded default, kept in [`Session`] itself):
//! a store every replica of a cluster shares ([`super::pg::PgSessions`]).
//!
//! The calls are synchronous like the file store's: a message is stored
//! before [`Session::append`] returns, so a crash loses at most the
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
    /// Store one message (`line`, JSON text) at the end of `key`'s
    /// transcript, as part of the turn holding it.
    fn append(&self, key: &str, line: &str) -> std::io::Result<()>;
    /// Replace `key`'s transcript with `messages` (compaction, repairs);
    /// `aside` (JSON text) is kept beside, out of the transcript.
    fn replace(&self, key: &str, messages: &[Value], aside: &[String]) -> std::io::Result<()>;
    /// Start `key` over; its old messages are kept, archived.
    fn archive(&self, key: &str) -> std::io::Result<()>;
    /// Hold `key` for one turn, cluster-wide, waiting at most `wait`.
    fn hold<'a>(&'a self, key: &'a str, wait: Duration) -> Held<'a>;
    /// Every session key it holds.
    fn keys(&self) -> std::io::Result<Vec<String>>;
    /// Store a session written elsewhere (`plughost sessions move`):
    /// `false` when `key` exists here already (nothing is written then).
    fn import(&self, key: &str, lines: &[String]) -> std::io::Result<bool>;
}
