//! Claude Code's variable expansion in MCP server fields (`.mcp.json` and a
//! manifest's `mcpServers`): `${VAR}` is the environment variable `VAR`,
//! `${VAR:-default}` is `VAR` when it is set, else `default`. The plugin's
//! own `${CLAUDE_PLUGIN_ROOT}` / `${CLAUDE_PLUGIN_DATA}` (and v1's
//! `${PLUGIN_ROOT}` / `${PLUGIN_DATA}`) win over the environment, as in
//! Claude Code, where they are set for the plugin.
//!
//! As Claude Code reads it: a reference runs from `${` to the first `}`,
//! its content split at the first `:-`; no nesting, and a bare `$VAR` is
//! left as written. The expansion is one pass, so a value taken from the
//! environment is never expanded again.
//!
//! Decision where Claude Code only warns: a variable that is unset and has
//! no default makes its server fail to load, with a diagnostic naming the
//! variable, instead of starting the server with the literal `${VAR}`
//! (which would fail later, less clearly).

use std::path::Path;

/// The plugin-scoped names, replaced before the environment is asked.
const ROOT_NAMES: [&str; 2] = ["CLAUDE_PLUGIN_ROOT", "PLUGIN_ROOT"];
const DATA_NAMES: [&str; 2] = ["CLAUDE_PLUGIN_DATA", "PLUGIN_DATA"];

/// `value` with every `${…}` reference expanded; `lookup` reads the
/// environment. `Err` names the variables that are unset and have no default.
pub fn expand_with(
    value: &str,
    root: &Path,
    data: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut missing: Vec<&str> = Vec::new();
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            // An unterminated reference is text, as Claude Code's pattern leaves it.
            out.push_str(&rest[at..]);
            rest = "";
            break;
        };
        let content = &after[..end];
        let (name, default) = match content.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (content, None),
        };
        if ROOT_NAMES.contains(&name) {
            out.push_str(&root.to_string_lossy());
        } else if DATA_NAMES.contains(&name) {
            out.push_str(&data.to_string_lossy());
        } else if let Some(v) = lookup(name) {
            out.push_str(&v);
        } else if let Some(d) = default {
            out.push_str(d);
        } else {
            missing.push(name);
            out.push_str(&rest[at..at + 3 + end]);
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(format!(
            "missing environment variable{}: {} (set it, or write ${{VAR:-default}})",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        ))
    }
}

/// [`expand_with`] over this process's environment.
pub fn expand(value: &str, root: &Path, data: &Path) -> Result<String, String> {
    expand_with(value, root, data, &|name| std::env::var(name).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("t0k".into()),
            "EMPTY" => Some(String::new()),
            "LOOPS" => Some("${TOKEN}".into()),
            _ => None,
        }
    }

    fn x(value: &str) -> Result<String, String> {
        expand_with(value, Path::new("/r"), Path::new("/d"), &env)
    }

    #[test]
    fn set_variables_defaults_and_the_plugins_own_names_expand() {
        assert_eq!(x("Bearer ${TOKEN}").unwrap(), "Bearer t0k");
        assert_eq!(x("${TOKEN:-other}").unwrap(), "t0k");
        assert_eq!(
            x("${UNSET:-http://127.0.0.1:8/mcp}").unwrap(),
            "http://127.0.0.1:8/mcp"
        );
        assert_eq!(x("${UNSET:-}").unwrap(), "");
        assert_eq!(x("${UNSET:-a:-b}").unwrap(), "a:-b");
        assert_eq!(x("${EMPTY:-d}").unwrap(), "", "set but empty is set");
        assert_eq!(
            x("${CLAUDE_PLUGIN_ROOT}/s:${PLUGIN_DATA}").unwrap(),
            "/r/s:/d"
        );
        assert_eq!(x("${PLUGIN_ROOT:-x}").unwrap(), "/r");
    }

    #[test]
    fn one_pass_no_bare_dollar_and_unterminated_text_stay() {
        assert_eq!(x("${LOOPS}").unwrap(), "${TOKEN}");
        assert_eq!(x("$TOKEN and ${TOKEN").unwrap(), "$TOKEN and ${TOKEN");
        assert_eq!(x("no refs").unwrap(), "no refs");
    }

    #[test]
    fn unset_without_default_names_every_variable() {
        let e = x("${A}/${TOKEN}/${B}").unwrap_err();
        assert!(e.contains("missing environment variables: A, B"), "{e}");
        let e = x("${A}").unwrap_err();
        assert!(e.contains("variable: A "), "{e}");
    }
}
