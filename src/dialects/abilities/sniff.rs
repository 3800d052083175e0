//! Install detection: which dialect a plugin in plughost's own directories
//! is, by what its files show, and settling a plugin given to a dialect
//! that way or by `plugins.dialects`.

use std::path::Path;

use super::super::{by_id, by_name, formats, DIALECTS};
use crate::plugins::discovery::Candidate;
use crate::plugins::format::{DialectId, Verdict};

/// A dialect that recognises its plugins by their files.
pub trait Sniff: Send + Sync {
    /// Why the plugin directory `dir`, which names no dialect, is one of
    /// this dialect's (what its files show), or `None`. Asked in table
    /// order for a plugin in plughost's own directories; the reason is what
    /// `plugins install` prints.
    fn sniff(&self, dir: &Path) -> Option<String>;

    /// Settle candidate `c`, just given to this dialect by its files
    /// ([`Sniff::sniff`]) or by `plugins.dialects`, whose manifest was
    /// read by the directory default's rules: a dialect whose plugins'
    /// manifests are their own (a bundle's v1 `plugin.json`) reads it again
    /// and says whether the plugin loads. By default `c` stays as it is.
    fn admit_sniffed(&self, c: &mut Candidate) {
        let _ = c;
    }
}

/// [`Sniff::admit_sniffed`] of the dialect `d`, when it has the ability.
fn admit(d: &dyn super::super::Dialect, c: &mut Candidate) {
    if let Some(sniff) = d.abilities().sniff {
        sniff.admit_sniffed(c);
    }
}

/// Settle each candidate's dialect, in this order: an explicit
/// `plugins.dialects.<key>` of `config.json`; else its origin (a dialect's
/// own locations and entry points already tagged it); else what a plugin in
/// plughost's own directories shows ([`sniff`]); else `flowly`. A name this
/// build does not know leaves the plugin unloaded, saying which ones exist.
pub fn choose(
    home: &Path,
    candidates: &mut [Candidate],
) -> Result<(), crate::plugins::config::ConfigError> {
    let explicit = crate::plugins::config::read_dialects(home)?;
    for c in candidates.iter_mut() {
        if let Some(name) = explicit.get(&c.key) {
            match by_name(name) {
                Some(d) => {
                    c.dialect = d.id();
                    admit(d, c);
                }
                None => {
                    let known: Vec<&str> = DIALECTS.iter().map(|d| d.name()).collect();
                    c.skip_reason = Some(Verdict::Unloadable(format!(
                        "plugins.dialects.{} in config.json names the dialect '{name}', which this build does not have (known: {}); fix it",
                        c.key,
                        known.join(", ")
                    )));
                }
            }
        } else if c.dialect == formats().default_id() {
            if let Some((d, why)) = sniff_why(&c.dir) {
                tracing::debug!("plugin '{}' is a {d} plugin: {why}", c.key);
                c.dialect = d;
                if let Some(dialect) = by_id(d) {
                    admit(dialect, c);
                }
            }
        }
    }
    Ok(())
}

/// The dialect a plugin directory's own files show, and why
/// ([`Sniff::sniff`], asked in table order); `None`: nothing but the
/// default's conventions.
pub fn sniff_why(dir: &Path) -> Option<(DialectId, String)> {
    let look = || {
        DIALECTS
            .iter()
            .find_map(|d| d.abilities().sniff?.sniff(dir).map(|why| (d.id(), why)))
    };
    // Once per build: the build's look-ahead thread sniffs while the
    // interpreter starts (`host::build`), and `choose` takes its answer.
    match dir.to_str() {
        Some(key) => crate::plugins::snapshot::derived("sniff", key, look),
        None => look(),
    }
}

/// The dialect a plugin directory's own files show ([`sniff_why`]).
pub fn sniff(dir: &Path) -> Option<DialectId> {
    sniff_why(dir).map(|(d, _)| d)
}
