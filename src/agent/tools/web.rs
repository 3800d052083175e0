//! The dialects' built-in tools (Flowly's `web_search` / `web_extract`),
//! offered by the agent while a web backend plugin's provider is available.
//! The tools and the Python provider registry are the dialect's
//! ([`crate::dialects::Dialect::builtin_tools`]); `plugins doctor`'s view of
//! them is the dialect's doctor section.

/// Every dialect's built-in tools (owner `builtin`) for the host whose home
/// is `home` (its `config.json` holds the providers' settings).
pub fn web_tools(home: &std::path::Path) -> Vec<crate::core::registry::Tool> {
    crate::dialects::builtin_tools(home, super::BUILTIN_OWNER)
}
