//! What a dialect tells the event-reference generator about its plugin API: the types each
//! dialect fills in its own folder (`src/dialects/<name>/reference.rs`).
//! Here, below the dialects, so a dialect describes itself without
//! depending on the generator that reads it.

use crate::core::hooks::{ActionKind, HookEvent};

/// What the reference needs to know about one plugin API.
pub struct DialectDoc {
    /// The dialect's name (`flowly`), also the file name: `docs/<name>-events.md`.
    pub name: &'static str,
    /// How people write it (`Flowly`).
    pub title: &'static str,
    /// How a hook callback is called and registered, one paragraph.
    pub calling: &'static str,
    /// How an answer of `kind` is spelled in this API for `event`.
    pub answer: fn(HookEvent, ActionKind) -> &'static str,
    /// What each method of the registration context does (name, text).
    /// Every captured method must be here: the rendering fails otherwise.
    pub methods: &'static [(&'static str, &'static str)],
    /// What each field a callback can see means (name, meaning). Every
    /// captured field must be here: the rendering fails otherwise.
    pub fields: &'static [(&'static str, &'static str)],
    /// A note for one event beyond the table (`""` for none).
    pub note: fn(HookEvent) -> &'static str,
    /// The recording plugin: (file name, text) of a plugin directory. Its
    /// `register` records the context's methods and attributes and hooks
    /// every event; a tool `recorded` returns what it saw as JSON
    /// (`{"methods": [[name, signature, doc]], "attributes": [[name, type]],
    /// "events": {event: [[field, type]]}}`).
    pub recorder: &'static [(&'static str, &'static str)],
    /// A plugin whose callback on every event raises, to learn which
    /// events fail closed.
    pub raiser: &'static [(&'static str, &'static str)],
    /// For a dialect whose plugins hook events of their own names mapped
    /// onto loop points (Felix, Codumentor): that mapping; `None` for one
    /// whose plugins hook the seed's events (Flowly, Hermes).
    pub own_events: Option<&'static OwnEvents>,
}

/// A dialect's own event names and where they fire: the reference lists
/// them instead of the seed's events, each with its loop points' row of
/// [`HOOK_SPECS`](crate::core::hooks::HOOK_SPECS).
pub struct OwnEvents {
    /// How a plugin's registration is spelled (`register(registry)`).
    pub register: &'static str,
    /// Event names the dialect's Rust side knows (Codumentor's in-scope
    /// list); the recording plugin adds those its Python side knows.
    pub known: &'static [&'static str],
    /// The loop points an event fires at: the dialect's own mapping table,
    /// the one loading uses (empty: it never fires here).
    pub points: fn(&str) -> Vec<HookEvent>,
    /// What the answers of an event do; `None` for an event the dialect's
    /// notes do not cover (the rendering fails then).
    pub answers: fn(&str) -> Option<&'static str>,
    /// Objects the callbacks get beside the payload (captured key, heading,
    /// one paragraph), each a table of the fields the recorder saw.
    pub objects: &'static [(&'static str, &'static str, &'static str)],
}
