//! What a dialect may do beyond the core contract ([`super::Dialect`]):
//! one small trait per concern, each implemented by the dialects that
//! have the ability, found through [`super::Dialect::abilities`].
//!
//! - [`Sniff`]: install detection (which dialect a plugin directory's
//!   files show, and settling a plugin given to it that way).
//! - [`LoadOrder`]: its own plugins' load order and dependencies.
//! - [`Doctor`], [`Providers`]: its part of `plugins doctor`.
//! - [`TerminalCommands`]: `plughost <dialect> NAME`.
//! - [`BuiltinTools`], [`RunningTools`], [`Renderers`]: tools it offers
//!   itself, tools its plugins register while running, how its tools'
//!   results read.
//! - [`Isolated`]: what its hooks need when they run in a worker.
//! - [`SessionState`]: its per-session state, out of a session's slots and
//!   back (a pair of functions, no trait object needed).
//! - [`PythonClasses`]: its classes in the wheel's module.
//!
//! Each file holds a trait, the types it speaks in and the walk over the
//! dialect table that the rest of plughost calls (`crate::dialects::*`).

mod doctor;
mod isolated;
mod marketplaces;
mod order;
mod python;
mod sniff;
mod terminal;
mod tools;

pub use doctor::{
    doctor_modules, doctor_sections, not_used, providers, Doctor, DoctorPlugin, DoctorSection,
    Providers,
};
pub use isolated::{Carried, Isolated, SessionState};
pub use marketplaces::{marketplaces, Marketplaces};
pub use order::{check_dependencies, load_order, DependencyState, LoadOrder};
pub use python::{add_python_classes, PythonClasses};
pub use sniff::{choose, sniff, sniff_why, Sniff};
pub use terminal::{TerminalCommands, TerminalError};
pub use tools::{builtin_tools, BuiltinTools, Renderers, RunningTools};

/// The optional abilities of one dialect: `None` for each it lacks (the
/// default, which behaves as a dialect that does nothing there).
#[derive(Clone, Copy, Default)]
pub struct Abilities<'a> {
    pub sniff: Option<&'a dyn Sniff>,
    pub load_order: Option<&'a dyn LoadOrder>,
    pub doctor: Option<&'a dyn Doctor>,
    pub providers: Option<&'a dyn Providers>,
    pub terminal: Option<&'a dyn TerminalCommands>,
    pub builtin_tools: Option<&'a dyn BuiltinTools>,
    pub running_tools: Option<&'a dyn RunningTools>,
    pub renderers: Option<&'a dyn Renderers>,
    pub isolated: Option<&'a dyn Isolated>,
    pub session_state: Option<SessionState>,
    pub python_classes: Option<&'a dyn PythonClasses>,
    pub marketplaces: Option<&'a dyn Marketplaces>,
}

#[cfg(test)]
mod tests {
    use super::Abilities;
    use crate::dialects::DIALECTS;

    /// The dialects that have an ability, in table order.
    fn having(ability: fn(&Abilities<'_>) -> bool) -> Vec<&'static str> {
        DIALECTS
            .iter()
            .filter(|d| ability(&d.abilities()))
            .map(|d| d.name())
            .collect()
    }

    /// Each ability is had by the dialects that overrode its methods when
    /// they were methods of `Dialect`.
    #[test]
    fn each_ability_belongs_to_the_dialects_that_have_it() {
        assert_eq!(having(|a| a.sniff.is_some()), ["hermes", "bundle"]);
        assert_eq!(having(|a| a.load_order.is_some()), ["hermes", "codumentor"]);
        assert_eq!(
            having(|a| a.doctor.is_some()),
            ["flowly", "hermes", "felix", "codumentor"]
        );
        assert_eq!(having(|a| a.providers.is_some()), ["hermes"]);
        assert_eq!(having(|a| a.terminal.is_some()), ["hermes"]);
        assert_eq!(having(|a| a.builtin_tools.is_some()), ["flowly"]);
        assert_eq!(having(|a| a.running_tools.is_some()), ["codumentor"]);
        assert_eq!(having(|a| a.renderers.is_some()), ["hermes", "felix"]);
        assert_eq!(
            having(|a| a.isolated.is_some()),
            ["hermes", "codumentor", "bundle"]
        );
        assert_eq!(having(|a| a.session_state.is_some()), ["codumentor"]);
        assert_eq!(having(|a| a.python_classes.is_some()), ["flowly"]);
        let ranks: Vec<_> = DIALECTS
            .iter()
            .filter_map(|d| Some((d.name(), d.abilities().doctor?.modules_rank()?)))
            .collect();
        assert_eq!(ranks, [("flowly", 0), ("felix", 2), ("codumentor", 1)]);
    }
}
