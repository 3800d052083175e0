//! Flowly's built-in `web_search` / `web_extract`, offered by the agent
//! while a web backend plugin's provider is available. The tools and the
//! Python provider registry are the Flowly dialect's
//! ([`crate::dialects::flowly::web`]); `plugins doctor`'s view of them is
//! [`crate::host::web_report`].

/// `web_search` and `web_extract` (Flowly's, owner `builtin`) for the host
/// whose home is `home` (its `config.json` holds the providers' settings).
pub fn web_tools(home: &std::path::Path) -> Vec<crate::core::registry::Tool> {
    crate::dialects::flowly::web::web_tools(home, super::BUILTIN_OWNER)
}
