//! The one table of slash commands.
//!
//! Every built-in command is a row here: its names, its `/help` summary,
//! where it can be run (the agent's loop, `plughost commands run`, MCP's
//! `prompts/get`, the wheel's `Host.run_command`) and the typed id its
//! runner dispatches on. Plugin commands join the table from the
//! [`Registry`]. The CLI, the agent, MCP and every `/help` list and
//! dispatch from [`CommandTable`], so a command is added in one place and
//! the listings cannot drift apart.

use std::borrow::Cow;

use super::registry::{normalize_command_name, Command, Registry};

/// Where a command line can be run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// The agent loop (`run`, `chat`, `serve`'s chat endpoints, the wheel's agent).
    Agent,
    /// `plughost commands run` / `commands list`.
    Cli,
    /// MCP's `prompts/list` and `prompts/get`.
    Mcp,
    /// The wheel's `Host.run_command`.
    Wheel,
}

/// The surfaces [`crate::host::Host::run_command`] serves: one router, so a
/// built-in it answers is available on all three.
const HOST: &[Surface] = &[Surface::Cli, Surface::Mcp, Surface::Wheel];
const EVERYWHERE: &[Surface] = &[Surface::Agent, Surface::Cli, Surface::Mcp, Surface::Wheel];
const AGENT: &[Surface] = &[Surface::Agent];

/// A built-in command, as its runner dispatches on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltinId {
    /// `/help`: the commands of the surface.
    Help,
    /// `/plugins`: the short plugin status.
    Plugins,
    /// `/plugins doctor`: the doctor report with this process's counts.
    PluginsDoctor,
    /// `/new`, `/clear`: start a new session.
    NewSession,
    /// `/compact`: keep only the recent messages.
    Compact,
}

/// Where a built-in's `/help` line goes: before the plugin commands (the
/// host's own) or after them (the agent's session commands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    BeforePlugins,
    AfterPlugins,
}

/// One row of the table.
#[derive(Debug)]
pub struct Builtin {
    pub id: BuiltinId,
    /// The names it answers to (normalised); the first names it in listings.
    pub names: &'static [&'static str],
    /// The first word its arguments must be (`/plugins doctor`), if any.
    pub subcommand: Option<&'static str>,
    /// The `/help` line's summary, as the line reads (lower case first);
    /// listings show it capitalised.
    pub summary: &'static str,
    pub available: &'static [Surface],
    pub place: Place,
    /// Refused as a plugin command's name (the dialects warn and skip it).
    pub reserved: bool,
    /// Listed by `commands list --json` and in the CLI's did-you-mean names
    /// (`/plugins` never was: it is kept out so that output stays as it is).
    pub cli_listed: bool,
}

/// Every built-in command, in `/help` order within each [`Place`].
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        id: BuiltinId::Help,
        names: &["help"],
        subcommand: None,
        summary: "list the commands",
        available: EVERYWHERE,
        place: Place::BeforePlugins,
        reserved: true,
        cli_listed: true,
    },
    Builtin {
        id: BuiltinId::Plugins,
        names: &["plugins"],
        subcommand: None,
        summary: "plugin status: loaded, failed, disabled",
        available: EVERYWHERE,
        place: Place::BeforePlugins,
        reserved: false,
        cli_listed: false,
    },
    Builtin {
        id: BuiltinId::PluginsDoctor,
        names: &["plugins"],
        subcommand: Some("doctor"),
        summary: "the plugins doctor report, with this process's hook call counts",
        available: AGENT,
        place: Place::AfterPlugins,
        reserved: false,
        cli_listed: false,
    },
    Builtin {
        id: BuiltinId::NewSession,
        names: &["new", "clear"],
        subcommand: None,
        summary: "start a new session",
        available: AGENT,
        place: Place::AfterPlugins,
        reserved: true,
        cli_listed: false,
    },
    Builtin {
        id: BuiltinId::Compact,
        names: &["compact"],
        subcommand: None,
        summary: "keep only the recent messages",
        available: AGENT,
        place: Place::AfterPlugins,
        reserved: true,
        cli_listed: false,
    },
];

impl Builtin {
    /// `/new, /clear`, `/plugins doctor`: how `/help` spells it.
    fn usage(&self) -> String {
        let names: Vec<String> = self.names.iter().map(|n| format!("/{n}")).collect();
        match self.subcommand {
            Some(sub) => format!("{} {sub}", names.join(", ")),
            None => names.join(", "),
        }
    }

    fn available_on(&self, surface: Surface) -> bool {
        self.available.contains(&surface)
    }

    /// The summary as a listing's description: first letter capitalised.
    fn description(&self) -> String {
        let mut chars = self.summary.chars();
        match chars.next() {
            Some(first) => first.to_uppercase().chain(chars).collect(),
            None => String::new(),
        }
    }
}

/// Whether `name` is a built-in the host answers before plugin commands of
/// that name (a plugin registering it is warned that it is shadowed).
pub fn answered_by_host(name: &str) -> bool {
    BUILTINS.iter().any(|b| {
        b.subcommand.is_none() && HOST.iter().all(|s| b.available_on(*s)) && b.names.contains(&name)
    })
}

/// Split a command line (with or without its `/`) into its normalised name
/// and the raw text after it.
pub fn split_line(line: &str) -> (String, &str) {
    let trimmed = line.trim();
    let rest = trimmed.strip_prefix('/').unwrap_or(trimmed);
    let (word, args) = match rest.find(char::is_whitespace) {
        Some(i) => (&rest[..i], rest[i..].trim_start()),
        None => (rest, ""),
    };
    (normalize_command_name(word), args)
}

/// The built-in that `name` (normalised) with `args` runs on `surface`: a
/// row whose subcommand the arguments start with first, then a plain one.
pub fn builtin(surface: Surface, name: &str, args: &str) -> Option<BuiltinId> {
    let first_arg = args.split_whitespace().next();
    let rows = || {
        BUILTINS
            .iter()
            .filter(move |b| b.available_on(surface) && b.names.contains(&name))
    };
    rows()
        .find(|b| b.subcommand.is_some() && b.subcommand == first_arg)
        .or_else(|| rows().find(|b| b.subcommand.is_none()))
        .map(|b| b.id)
}

/// One listed command: a built-in or a plugin's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    pub name: &'a str,
    pub description: Cow<'a, str>,
    pub args_hint: &'a str,
    /// The plugin that registered it; `core` for a built-in.
    pub plugin: &'a str,
}

/// The built-ins and the registry's plugin commands, listed and looked up
/// together.
pub struct CommandTable<'a> {
    plugins: Vec<&'a Command>,
}

impl<'a> CommandTable<'a> {
    pub fn new(registry: &'a Registry) -> CommandTable<'a> {
        CommandTable {
            plugins: registry.commands(),
        }
    }

    /// The commands `surface` lists (MCP's prompts, `commands list --json`,
    /// the CLI's did-you-mean names): its built-ins before the plugins' own.
    pub fn listing(&self, surface: Surface) -> Vec<Entry<'a>> {
        let listed = |b: &Builtin| match surface {
            Surface::Cli => b.cli_listed,
            _ => b.available_on(surface) && b.subcommand.is_none(),
        };
        BUILTINS
            .iter()
            .filter(|b| b.place == Place::BeforePlugins && listed(b))
            .map(|b| Entry {
                name: b.names[0],
                description: Cow::Owned(b.description()),
                args_hint: "",
                plugin: "core",
            })
            .chain(self.plugins.iter().map(|c| Entry {
                name: &c.name,
                description: Cow::Borrowed(c.description.as_str()),
                args_hint: &c.args_hint,
                plugin: &c.plugin,
            }))
            .collect()
    }

    /// The `/help` text of `surface`: every command it runs, with its
    /// summary and arguments hint.
    pub fn help_text(&self, surface: Surface) -> String {
        let builtins = |place: Place| {
            BUILTINS
                .iter()
                .filter(move |b| b.place == place && b.available_on(surface))
                .map(|b| format!("  {} — {}", b.usage(), b.summary))
        };
        let plugins = self.plugins.iter().map(|c| {
            let hint = if c.args_hint.is_empty() {
                String::new()
            } else {
                format!(" {}", c.args_hint)
            };
            let desc = if c.description.is_empty() {
                String::new()
            } else {
                format!(" — {}", c.description)
            };
            format!("  /{}{hint}{desc}", c.name)
        });
        std::iter::once("Commands:".to_string())
            .chain(builtins(Place::BeforePlugins))
            .chain(plugins)
            .chain(builtins(Place::AfterPlugins))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::registry::RESERVED_COMMANDS;

    #[test]
    fn reserved_names_are_the_tables() {
        let mut from_table: Vec<&str> = BUILTINS
            .iter()
            .filter(|b| b.reserved)
            .flat_map(|b| b.names.iter().copied())
            .collect();
        let mut constant = RESERVED_COMMANDS.to_vec();
        from_table.sort();
        constant.sort();
        assert_eq!(from_table, constant);
    }

    #[test]
    fn the_host_answers_help_and_plugins() {
        let answered: Vec<&str> = ["help", "plugins", "new", "clear", "compact", "ping"]
            .into_iter()
            .filter(|n| answered_by_host(n))
            .collect();
        assert_eq!(answered, ["help", "plugins"]);
    }

    #[test]
    fn a_host_builtin_is_on_every_host_surface() {
        for b in BUILTINS {
            let on: Vec<bool> = HOST.iter().map(|s| b.available_on(*s)).collect();
            assert!(on.iter().all(|x| *x) || on.iter().all(|x| !*x), "{b:?}");
        }
    }

    #[test]
    fn lines_dispatch_by_surface() {
        assert_eq!(
            builtin(Surface::Agent, "plugins", "doctor"),
            Some(BuiltinId::PluginsDoctor)
        );
        assert_eq!(
            builtin(Surface::Cli, "plugins", "doctor"),
            Some(BuiltinId::Plugins)
        );
        assert_eq!(
            builtin(Surface::Agent, "clear", ""),
            Some(BuiltinId::NewSession)
        );
        assert_eq!(builtin(Surface::Mcp, "compact", ""), None);
        assert_eq!(split_line(" /Ping  a b"), ("ping".to_string(), "a b"));
    }

    #[test]
    fn help_texts_read_as_before() {
        let registry = Registry::default();
        let table = CommandTable::new(&registry);
        let host = "Commands:\n  /help — list the commands\n  /plugins — plugin status: loaded, failed, disabled";
        assert_eq!(table.help_text(Surface::Cli), host);
        assert_eq!(
            table.help_text(Surface::Agent),
            format!("{host}\n  /plugins doctor — the plugins doctor report, with this process's hook call counts\n  /new, /clear — start a new session\n  /compact — keep only the recent messages")
        );
        let mcp: Vec<(String, String)> = table
            .listing(Surface::Mcp)
            .into_iter()
            .map(|e| (e.name.to_string(), e.description.into_owned()))
            .collect();
        assert_eq!(
            mcp,
            [
                ("help".to_string(), "List the commands".to_string()),
                (
                    "plugins".to_string(),
                    "Plugin status: loaded, failed, disabled".to_string()
                )
            ]
        );
        let cli: Vec<&str> = table.listing(Surface::Cli).iter().map(|e| e.name).collect();
        assert_eq!(cli, ["help"]);
    }
}
