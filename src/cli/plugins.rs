//! `plughost plugins install | remove | doctor`.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use std::path::PathBuf;

use super::exit::{Exit, Failure};
use super::{build_host, home_of, print_json, suggest, table, Cli, RESTART};
use crate::host::doctor::Report;
use crate::host::Host;
use crate::plugins::config;
use crate::plugins::discovery::{discover, Source};
use crate::plugins::install::{self, InstallError};
use crate::runtime::Runtime;

impl From<InstallError> for Failure {
    fn from(e: InstallError) -> Failure {
        Failure::failed(e.to_string())
    }
}

/// `plugins install …`: one SOURCE, or every entry of `--from-lock FILE`.
pub(super) fn install_command(
    cli: &Cli,
    runtime: &Runtime,
    command: &super::args::PluginsCmd,
) -> Result<Exit, Failure> {
    let super::args::PluginsCmd::Install {
        source,
        enable,
        force,
        dialect,
        git_ref,
        from_lock,
        editable,
        own_env,
        reload,
        ..
    } = command
    else {
        unreachable!("install_command is called for plugins install");
    };
    let home = home_of(cli);
    if let Some(file) = from_lock {
        return super::lock::from_lock(&home, file, *force, *enable);
    }
    let no_pins = Default::default();
    let ask = super::deps::Ask {
        home: &home,
        own_env: *own_env,
        constraints: &no_pins,
        placed: Default::default(),
    };
    let prepare = |dir: &Path, name: &str| ask.run(dir, name);
    // NAME@MARKETPLACE: the marketplace's source for it, pinned.
    let mut source = source.clone().unwrap_or_default();
    let mut git_ref = git_ref.clone();
    let market = crate::dialects::abilities::marketplaces();
    if let Some(resolved) = market.and_then(|m| m.resolve(&home, &source)) {
        let (resolved, pinned) = resolved.map_err(Failure::usage)?;
        source = resolved;
        git_ref = git_ref.or(pinned);
    }
    let options = install::Options {
        force: *force,
        git_ref: git_ref.as_deref(),
        expect_hash: None,
        editable: *editable,
        prepare: Some(install::Prepare(&prepare)),
    };
    install(
        &home,
        &source,
        *enable,
        (&options, &ask),
        dialect.as_deref(),
        || build_host(cli, runtime),
    )
    .and_then(|exit| then_reload(cli, exit, *reload))
}

/// `--reload` after a command that succeeded: the server running on the
/// home reloads its plugins (found by the file it writes there), and what
/// changed is printed. No server, or a refused reload, fails the command.
pub(super) fn then_reload(cli: &Cli, exit: Exit, reload: bool) -> Result<Exit, Failure> {
    if !reload || exit != Exit::Success {
        return Ok(exit);
    }
    let home = home_of(cli);
    match Runtime::current()
        .tokio()
        .block_on(crate::serve::watch::ask_reload(&home))
    {
        Ok(report) => {
            println!("{}", report.summary());
            if report.failed.is_empty() && report.not_loaded.is_empty() {
                Ok(Exit::Success)
            } else {
                Ok(Exit::Failed)
            }
        }
        Err(e) => Err(Failure::failed(format!(
            "the running server did not reload: {e}"
        ))),
    }
}

/// `plugins install`. With `--enable` the plugin is loaded once right
/// away: one that fails to import or register is reported with its error
/// (exit 1) and left installed but not enabled, so no later command trips
/// over it. Every install is recorded in `plugins.lock.json`.
pub(super) fn install(
    home: &Path,
    source: &str,
    enable: bool,
    (options, ask): (&install::Options<'_>, &super::deps::Ask<'_>),
    dialect: Option<&str>,
    load: impl FnOnce() -> Result<Host, Failure>,
) -> Result<Exit, Failure> {
    let spec = install::parse_source(source).map_err(|e| Failure::usage(e.to_string()))?;
    let dialect = dialect_named(dialect)?;
    // A lock file that cannot be updated is refused before installing.
    crate::plugins::lock::read(home)?;
    // A config.json that cannot be edited is refused before anything is
    // installed, not after.
    if dialect.is_some() {
        config::read_dialects(home)?;
    }
    let before = if enable {
        Some(config::read_plugin_lists(home)?)
    } else {
        if dialect.is_some() {
            config::read_plugin_lists(home)?;
        }
        None
    };
    let done = install::install_with(home, &spec, options, crate::dialects::formats())?;
    let version = if done.version.is_empty() {
        String::new()
    } else {
        format!(" {}", done.version)
    };
    let verb = if done.replaced {
        "Replaced"
    } else {
        "Installed"
    };
    println!("{verb} {}{version} in {}.", done.name, done.path.display());
    // --- issue 50: how the kernel will confine it ---
    println!(
        "{}",
        crate::isolation::sandbox::install_line(
            home,
            &done.name,
            &done.path,
            done.dialect.as_str()
        )
    );
    super::deps::print_risk(&done.name, &done.capabilities, &done.path);
    super::lock::record(home, &done, dialect)?;
    super::user_config::ask(home, &done.name, done.dialect, &done.path)?;
    super::deps::record(home, &done.name, &ask.placed.borrow())?;
    if let Some(d) = dialect {
        config::set_dialect(home, &done.name, d)?;
        println!(
            "Loads as a {d} plugin (plugins.dialects.{} in config.json).",
            done.name
        );
    } else if done.dialect == crate::dialects::formats().default_id() {
        // The choice its own files made: said, never silent.
        match crate::dialects::sniff_why(&done.path) {
            Some((d, why)) => println!(
                "Loads as a {d} plugin: {why}. If it is written for another plugin API, install it with --dialect NAME (or set plugins.dialects.{} in config.json).",
                done.name
            ),
            None => println!(
                "Loads as a {} plugin, the default: nothing in its files is specific to another plugin API. If it is written for another plugin API, install it with --dialect NAME (or set plugins.dialects.{} in config.json).",
                done.dialect, done.name
            ),
        }
    }
    let Some(before) = before else {
        println!(
            "It is not enabled; enable it with: plughost plugins enable {}",
            done.name
        );
        println!("{RESTART}");
        return Ok(Exit::Success);
    };
    config::enable_plugin(home, &done.name)?;
    let host = load()?;
    let records = host.plugins();
    let record = records
        .iter()
        .find(|p| p.key == done.name && p.path == done.path)
        .or_else(|| records.iter().find(|p| p.key == done.name));
    if let Some(p) = record.filter(|p| p.loaded) {
        // Under plugins.strict_hooks the host refused to load it: it is not
        // loaded, and load_failure below says why.
        let undeclared = super::deps::undeclared(p, false);
        if !undeclared.is_empty() {
            let what = undeclared.describe();
            eprintln!(
                "plughost: note: plugin '{}' registers what its manifest does not declare: {what}",
                done.name
            );
        }
    }
    match record {
        Some(p) if p.loaded => {
            println!("Enabled {} (it loads: {}).", done.name, provides(&host, p));
            println!("{RESTART}");
            Ok(Exit::Success)
        }
        other => Err(load_failure(home, &done, &before, other)),
    }
}

/// The dialect `--dialect` names, or a usage error listing the ones this
/// build has.
fn dialect_named(dialect: Option<&str>) -> Result<Option<&'static str>, Failure> {
    Ok(match dialect.map(str::trim) {
        None => None,
        Some(name) => match crate::dialects::by_name(name) {
            Some(d) => Some(d.name()),
            None => {
                let known: Vec<&str> = crate::dialects::DIALECTS.iter().map(|d| d.name()).collect();
                return Err(Failure::usage(format!(
                    "--dialect '{name}' is not a dialect of this build; use one of: {}",
                    known.join(", ")
                )));
            }
        },
    })
}

/// An installed plugin that did not load with `--enable`: taken out of
/// `plugins.enabled` again unless it was there before, and the failure that
/// says why, where, and what to run once it is fixed.
fn load_failure(
    home: &Path,
    done: &install::Installed,
    before: &config::PluginLists,
    other: Option<&crate::host::PluginRecord>,
) -> Failure {
    let was_enabled = before.enabled.contains(&done.name);
    if !was_enabled {
        if let Err(e) = config::update_plugin_lists(home, |l| l.enabled.retain(|n| *n != done.name))
        {
            return e.into();
        }
    }
    let why = other
        .and_then(|p| p.error.clone())
        .unwrap_or_else(|| "it was not found after installing".into());
    let mut message = format!(
        "plugin '{}' was installed but fails to load: {why}",
        done.name
    );
    if let Some(failure) = other.and_then(|p| p.failure.as_ref()) {
        if let Some(at) = &failure.location {
            message.push_str(&format!("\n  at: {at}"));
        }
        if let Some(tb) = &failure.traceback {
            message.push('\n');
            message.push_str(tb.trim_end());
        }
    }
    message.push_str(&format!(
        "\n{}; fix it, then run: plughost plugins enable {}",
        if was_enabled {
            "It stays in plugins.enabled"
        } else {
            "It was not enabled"
        },
        done.name
    ));
    Failure::failed(message)
}

/// "2 tools, 1 hook", or "nothing registered"; a platform or provider
/// the plugin's dialect reports (a messaging platform, a memory or model
/// provider) counts too.
pub(super) fn provides(host: &crate::host::Host, p: &crate::host::PluginRecord) -> String {
    let providers = crate::dialects::providers(host.extensions(), &p.key).len()
        + host
            .extensions()
            .peek::<crate::isolation::WorkerReports>()
            .and_then(|r| r.of(&p.key))
            .map_or(0, |(lines, _)| lines.len());
    let parts: Vec<String> = [
        (p.tools.len(), "tool"),
        (p.hooks.len(), "hook"),
        (p.commands.len(), "command"),
        (p.skills.len(), "skill"),
        (providers, "platform or provider"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| match (*n, *what) {
        (1, what) => format!("1 {what}"),
        (n, "platform or provider") => format!("{n} platforms or providers"),
        (n, what) => format!("{n} {what}s"),
    })
    .collect();
    if parts.is_empty() {
        "nothing registered".into()
    } else {
        parts.join(", ")
    }
}

/// `plugins forget NAME… [--stray]`: take names out of config.json's
/// plugin lists without touching any plugin's files.
pub(super) fn forget(home: &Path, names: &[String], stray: bool) -> Result<Exit, Failure> {
    if names.is_empty() && !stray {
        return Err(Failure::usage(
            "name the entries to take out of config.json, or pass --stray for every entry that names no installed plugin",
        ));
    }
    let mut drop: Vec<String> = names.to_vec();
    if stray {
        drop.extend(stray_entries(home));
    }
    let lists = config::read_plugin_lists(home)?;
    let listed = |n: &String| lists.enabled.contains(n) || lists.disabled.contains(n);
    let (present, absent): (Vec<String>, Vec<String>) = drop.into_iter().partition(listed);
    if !present.is_empty() {
        config::update_plugin_lists(home, |l| {
            l.enabled.retain(|n| !present.contains(n));
            l.disabled.retain(|n| !present.contains(n));
        })?;
    }
    let mut present = present;
    present.dedup();
    for name in &present {
        println!("Forgot {name}.");
    }
    let entries: Vec<&str> = lists
        .enabled
        .iter()
        .chain(&lists.disabled)
        .map(String::as_str)
        .collect();
    for name in &absent {
        eprintln!(
            "plughost: '{name}' is in neither plugins.enabled nor plugins.disabled{}",
            super::suggest::did_you_mean(name, entries.iter().copied())
        );
    }
    if present.is_empty() && stray && names.is_empty() {
        println!("No stray entries in config.json.");
        return Ok(Exit::Success);
    }
    if !present.is_empty() {
        println!("{RESTART}");
    }
    Ok(Exit::ok_if(absent.is_empty()))
}

pub(super) fn remove(home: &Path, name: &str, yes: bool) -> Result<Exit, Failure> {
    let lists = config::read_plugin_lists(home)?;
    let user_root = home.join("plugins");
    let user = discover(
        &[(Source::User, user_root.clone())],
        &lists,
        crate::dialects::formats(),
    );
    let Some(found) = user.iter().find(|c| c.key == name).or_else(|| {
        user.iter()
            .find(|c| c.dir.file_name().is_some_and(|d| d == name))
    }) else {
        let elsewhere = known_plugin_keys(home);
        if bundled_keys(home).iter().any(|k| k == name) {
            return Err(Failure::failed(format!(
                "'{name}' is a bundled plugin and cannot be removed; disable it instead: plughost plugins disable {name}"
            )));
        }
        if elsewhere.iter().any(|k| k == name) {
            return Err(Failure::failed(format!(
                "'{name}' is a project plugin (.plughost/plugins/); delete its directory there"
            )));
        }
        return Err(Failure::failed(format!(
            "no user plugin named '{name}' in {}; see: plughost plugins list",
            user_root.display()
        )));
    };
    let (key, dir) = (found.key.clone(), found.dir.clone());
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::usage(format!(
                "refusing to remove '{key}' without confirmation: no terminal to ask on; pass -y to confirm"
            )));
        }
        eprint!("Remove plugin '{key}' and delete {}? [y/N] ", dir.display());
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim().to_lowercase().as_str(), "y" | "yes") {
            println!("Nothing removed.");
            return Ok(Exit::Failed);
        }
    }
    install::remove_dir(&dir)?;
    config::update_plugin_lists(home, |l| {
        l.enabled.retain(|n| *n != key);
        l.disabled.retain(|n| *n != key);
    })?;
    super::lock::forget(home, &key);
    super::deps::forget(home, &key);
    println!("Removed {key} ({}).", dir.display());
    println!("{RESTART}");
    Ok(Exit::Success)
}

pub(super) fn doctor(host: &Host, json: bool) -> Result<Exit, Failure> {
    let runtime = host.runtime();
    runtime
        .interpreter()
        .map_err(|e| Failure::failed(e.to_string()))?;
    let report = Report::new(host);
    // A server running on this home: what it loaded, and when.
    let running = runtime
        .tokio()
        .block_on(crate::serve::watch::ask_versions(host.home()));
    if json {
        let mut value = serde_json::to_value(&report).expect("the report serialises");
        if let serde_json::Value::Object(fields) = &mut value {
            fields.insert("lock".into(), super::lock::doctor_json(host.home()));
            if let Some(envs) = super::deps::doctor_json(host) {
                fields.insert("environments".into(), envs);
            }
            if let Some(running) = &running {
                fields.insert(
                    "running_server".into(),
                    serde_json::to_value(running).expect("serialisable"),
                );
            }
        }
        super::print_json(&value);
    } else {
        println!("{}", report.text());
        if let Some(lock) = super::lock::doctor_text(host.home()) {
            println!("{lock}");
        }
        if let Some(envs) = super::deps::doctor_text(host) {
            println!("{envs}");
        }
        if let Some(running) = &running {
            println!("{}", running.text());
        }
    }
    Ok(Exit::ok_if(!report.has_failures()))
}

/// `plugins list`: the table (or JSON) of every discovered plugin.
pub(super) fn list(cli: &Cli, runtime: &Runtime, json: bool) -> Result<Exit, Failure> {
    crate::plugins::install::sweep_interrupted(&home_of(cli));
    let host = build_host(cli, runtime)?;
    if json {
        print_json(&super::lock::with_lock_entries(
            &home_of(cli),
            &*host.plugins(),
        ));
    } else {
        print_plugins(&host);
        // What the host found settles most entries: discovery runs again
        // (every dialect's, with no Python) only for the names it did not.
        let records = host.plugins();
        let seen = |n: &String| records.iter().any(|r| r.key == *n || r.name == *n);
        let stray = stray_entries_among(&home_of(cli), seen);
        if !stray.is_empty() {
            eprintln!(
                    "note: config.json names plugins that are not installed: {}; remove them with: plughost plugins forget --stray",
                    stray.join(", ")
                );
        }
    }
    if super::process_ends_with_command() {
        // Unloading each plugin package from `sys.modules` and freeing it
        // (about 25k instructions a plugin) is left to the exit:
        // a listing ran no hook and no tool, so no module holds a record
        // still to write out. The host's other teardown runs as ever.
        crate::runtime::loader::leave_packages_to_exit();
    }
    drop(host);
    Ok(Exit::Success)
}

/// `plugins enable` / `disable`. Enabling a name no installed plugin has
/// is refused (a typo would otherwise sit in config.json doing nothing)
/// unless `force`; disabling one only warns, as it cannot switch anything
/// on.
pub(super) fn set_enabled(
    cli: &Cli,
    name: &str,
    enable: bool,
    force: bool,
) -> Result<Exit, Failure> {
    if name.trim().is_empty() {
        return Err(Failure::usage(
            "NAME must be a plugin's key (it was empty); see: plughost plugins list",
        ));
    }
    let home = home_of(cli);
    // An unusable config.json is reported first: it is the bigger problem.
    config::read_plugin_lists(&home)?;
    let known = known_plugin_keys(&home);
    if !known.iter().any(|k| k == name) {
        let hint = suggest::did_you_mean(name, known.iter().map(String::as_str));
        if !force {
            return Err(Failure::failed(format!(
                "no plugin named '{name}' is installed{hint}; see: plughost plugins list \
                 (to record the name anyway, pass --force)"
            )));
        }
        tracing::warn!(
            "no plugin named '{name}' is installed{hint}; recording it in config.json anyway"
        );
    }
    if enable {
        config::enable_plugin(&home, name)?;
        println!("Enabled {name}.");
    } else {
        config::disable_plugin(&home, name)?;
        println!("Disabled {name}.");
    }
    println!("{RESTART}");
    Ok(Exit::Success)
}

/// Names in plugins.enabled / plugins.disabled that no installed plugin
/// has (typos, removed plugins), for `plugins list` and `plugins forget --stray`.
pub(crate) fn stray_entries(home: &std::path::Path) -> Vec<String> {
    stray_entries_among(home, |_| false)
}

/// [`stray_entries`], where `known` names plugins already known to be
/// installed (a host's records), so discovery runs only for the rest.
fn stray_entries_among(home: &std::path::Path, known: impl Fn(&String) -> bool) -> Vec<String> {
    let Ok(lists) = config::read_plugin_lists(home) else {
        return Vec::new();
    };
    let unsettled: Vec<&String> = lists
        .enabled
        .iter()
        .chain(&lists.disabled)
        .filter(|n| !known(n))
        .collect();
    if unsettled.is_empty() {
        return Vec::new();
    }
    let installed = known_plugin_keys(home);
    let mut stray: Vec<String> = unsettled
        .into_iter()
        .filter(|n| !installed.contains(n))
        .cloned()
        .collect();
    stray.sort();
    stray.dedup();
    stray
}

/// Keys of every plugin discovery can see (no Python needed).
pub(crate) fn known_plugin_keys(home: &std::path::Path) -> Vec<String> {
    use crate::plugins::discovery::{discover, Source};
    // Project plugins count whether or not they are switched on yet
    // (PLUGHOST_ENABLE_PROJECT_PLUGINS): enabling one first is legitimate.
    let roots = vec![
        (Source::User, home.join("plugins")),
        (Source::Project, PathBuf::from(".plughost/plugins")),
    ];
    let mut keys = bundled_keys(home);
    keys.extend(
        discover(
            &roots,
            &config::PluginLists::default(),
            crate::dialects::formats(),
        )
        .into_iter()
        .map(|c| c.key),
    );
    // Plugins of other APIs (Hermes's own directories): their keys and
    // manifest names, either of which enables them.
    for c in crate::dialects::discover_all(home, &config::PluginLists::default()) {
        if let Ok(manifest) = &c.manifest {
            keys.push(manifest.name.clone());
        }
        keys.push(c.key);
    }
    keys
}

/// Keys of the bundled plugins, whether or not they could be written out.
pub(crate) fn bundled_keys(home: &std::path::Path) -> Vec<String> {
    use crate::plugins::discovery::{discover, Source};
    match crate::plugins::bundled::locate(home) {
        Ok(located) => discover(
            &[(Source::Bundled, located.dir().to_path_buf())],
            &config::PluginLists::default(),
            crate::dialects::formats(),
        )
        .into_iter()
        .map(|c| c.key)
        .collect(),
        Err(missing) => missing.names,
    }
}

fn print_plugins(host: &Host) {
    let plugins = host.plugins();
    if plugins.is_empty() {
        println!(
            "No plugins found (bundled, {}).",
            host.home().join("plugins").display()
        );
        return;
    }
    let rows = plugins
        .iter()
        .map(|p| {
            let status = if p.loaded {
                "loaded".to_string()
            } else if let Some(e) = &p.error {
                if p.enabled {
                    format!("error: {e}")
                } else {
                    format!("off: {e}")
                }
            } else {
                "off".to_string()
            };
            let mut provides = [
                (p.tools.len(), "tool"),
                (p.hooks.len(), "hook"),
                (p.commands.len(), "command"),
                (p.skills.len(), "skill"),
            ]
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| match (*n, *what) {
                (1, what) => format!("1 {what}"),
                (n, "platform or provider") => format!("{n} platforms or providers"),
                (n, what) => format!("{n} {what}s"),
            })
            .collect::<Vec<_>>()
            .join(", ");
            // A backend plugin's web providers (its manifest's provides_web_providers).
            if !p.provides_web_providers.is_empty() {
                let web = format!("web: {}", p.provides_web_providers.join(", "));
                provides = if provides.is_empty() {
                    web
                } else {
                    format!("{provides}, {web}")
                };
            }
            vec![
                p.key.clone(),
                p.version.clone(),
                p.source.as_str().to_string(),
                provides,
                status,
            ]
        })
        .collect::<Vec<_>>();
    println!(
        "{}",
        table::render(
            &["PLUGIN", "VERSION", "SOURCE", "PROVIDES", "STATUS"],
            &rows
        )
    );
}
