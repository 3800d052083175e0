//! The hook bus: event names, per-event contexts, actions, and callbacks.
//!
//! Plain Rust, no Python: a dialect (see `crate::dialects`) adapts its own
//! callbacks to [`HookCallback`], and a Rust service can register native
//! closures beside them.
//!
//! The model is split by concern: [`crate::core::points`] (the lane ids and
//! the loop's places), [`crate::core::lanes`] (how a lane combines
//! answers), [`crate::core::contexts`] (what callbacks see),
//! [`crate::core::decisions`] (what loop-point callbacks answer),
//! [`crate::core::callbacks`] (callbacks, their answers and counters) and
//! [`crate::core::bus`] (subscriptions). This module is the one path they
//! are all reachable by; the files themselves name each other directly, so
//! none depends on another through it.

pub use crate::core::bus::*;
pub use crate::core::callbacks::*;
pub use crate::core::contexts::*;
pub use crate::core::decisions::*;
pub use crate::core::lanes::*;
pub use crate::core::points::*;
