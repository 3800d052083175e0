//! A plugin's dependencies at the command line: installed by `plugins
//! install` (before the plugin is put in place), and by `plugins deps
//! sync` for the plugins already there; recorded in the lock file.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::exit::{Exit, Failure};
use crate::isolation::interpreter;
use crate::plugins::config;
use crate::plugins::deps::{self, own, shared, uv::Uv, DepsError, Requirements};
use crate::plugins::lock;

/// Where a plugin's dependencies went.
#[derive(Clone, Debug, Default)]
pub(super) struct Placed {
    /// `shared` or `own`; `None` when it needs nothing.
    pub environment: Option<String>,
    pub requirements: Vec<String>,
    pub versions: BTreeMap<String, String>,
    /// The shared environment's packages after this install, when it changed.
    pub shared_versions: Option<BTreeMap<String, String>>,
}

/// What an install asks of the dependency step.
pub(super) struct Ask<'a> {
    pub home: &'a Path,
    /// `--own-env`.
    pub own_env: bool,
    /// Versions to install again (`--from-lock`).
    pub constraints: &'a BTreeMap<String, String>,
    /// What the step did, for the lock entry.
    pub placed: RefCell<Placed>,
}

impl Ask<'_> {
    /// The step `install::Options::prepare` runs.
    pub(super) fn run(&self, dir: &Path, name: &str) -> Result<(), String> {
        let placed = prepare(self, dir, name).map_err(|e| e.message)?;
        *self.placed.borrow_mut() = placed;
        Ok(())
    }
}

fn failed(e: DepsError) -> Failure {
    Failure::failed(e.to_string())
}

/// The requirements of every user plugin but `except`, by name, with
/// whether it has its own environment.
fn others(home: &Path, except: &str) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(home.join("plugins")) else {
        return Vec::new();
    };
    let mut out: Vec<(String, PathBuf)> = entries
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(n, p)| !n.starts_with('.') && n != except && p.is_dir())
        .collect();
    out.sort();
    out
}

/// Whether the embedded interpreter meets the plugin's `requires-python`.
fn embedded_ok(reqs: &Requirements) -> bool {
    match (&reqs.requires_python, interpreter::embedded()) {
        (None, _) => true,
        (Some(spec), Some(found)) => interpreter::satisfies(spec, found.version),
        (Some(spec), None) => interpreter::embedded_version()
            .is_some_and(|(a, b)| interpreter::satisfies(spec, (a, b, 0))),
    }
}

fn shared_python() -> Result<PathBuf, Failure> {
    interpreter::embedded_python().ok_or_else(|| {
        Failure::failed(
            "the CPython plughost was built against is not on this machine any more, so the shared environment cannot be resolved for it",
        )
    })
}

/// Install plugin `name`'s dependencies (its files at `dir`): in its own
/// environment when asked or when it runs isolated, else in the shared one.
fn prepare(ask: &Ask<'_>, dir: &Path, name: &str) -> Result<Placed, Failure> {
    let home = ask.home;
    let reqs = deps::read(dir).map_err(failed)?;
    let isolated = config::read_isolation(home)?.covers(name);
    let fits = embedded_ok(&reqs);
    // An environment of its own stays with a plugin reinstalled without
    // --own-env (remove it to move it back to the shared one).
    // A `requires-python` the embedded interpreter does not meet gives the
    // plugin an environment of its own on a CPython that does, chosen here
    // (issue 47): it then runs in a worker on that interpreter.
    let own_env =
        ask.own_env || own::find(home, name).is_some() || !fits || (isolated && !reqs.is_empty());
    if !fits && !ask.own_env {
        println!(
            "Plugin '{name}' requires Python {}, which the embedded interpreter (Python {}) is not: it gets an environment of its own on a CPython that is, and runs in a worker there.",
            reqs.requires_python.as_deref().unwrap_or_default(),
            embedded_text()
        );
    }
    if own_env {
        let versions = build_own(home, name, &reqs, ask.constraints)?;
        let shared_versions = resync_shared(home, name, None)?;
        return Ok(Placed {
            environment: Some("own".into()),
            requirements: reqs.requires,
            versions,
            shared_versions,
        });
    }
    let shared_versions = resync_shared(home, name, Some((&reqs, ask.constraints)))?;
    own::remove(home, name);
    if reqs.is_empty() {
        return Ok(Placed {
            shared_versions,
            ..Placed::default()
        });
    }
    println!(
        "Installed its requirements ({}) in the shared environment {}.",
        reqs.requires.join(", "),
        shared::link(home).display()
    );
    Ok(Placed {
        environment: Some("shared".into()),
        requirements: reqs.requires,
        versions: shared_versions.clone().unwrap_or_default(),
        shared_versions,
    })
}

fn embedded_text() -> String {
    interpreter::embedded_version()
        .map(|(a, b)| format!("{a}.{b}"))
        .unwrap_or_else(|| "unknown".into())
}

/// Resolve the shared environment again from every plugin without an
/// environment of its own, `name` with `new` requirements (or left out);
/// the packages it now holds, `None` when nothing needed a change.
fn resync_shared(
    home: &Path,
    name: &str,
    new: Option<(&Requirements, &BTreeMap<String, String>)>,
) -> Result<Option<BTreeMap<String, String>>, Failure> {
    let mut members = Vec::new();
    for (other, path) in others(home, name) {
        if own::find(home, &other).is_some() {
            continue;
        }
        let requirements = deps::read(&path).map_err(failed)?;
        members.push(shared::Member {
            name: other,
            requirements,
        });
    }
    let empty = BTreeMap::new();
    let constraints = new.map_or(&empty, |(_, c)| c);
    if let Some((reqs, _)) = new {
        members.push(shared::Member {
            name: name.to_string(),
            requirements: reqs.clone(),
        });
    }
    let needed = members.iter().any(|m| !m.requirements.is_empty());
    if !needed && shared::site_dir(home).is_none() {
        return Ok(None);
    }
    let uv = Uv::locate().map_err(failed)?;
    let python = shared_python()?;
    match shared::sync(home, &uv, &python, &members, Some(name), constraints) {
        Ok(s) => Ok(Some(s.versions)),
        Err(e @ DepsError::Unresolvable { .. }) => {
            let own_hint = if new.is_some() {
                format!("\nplugin '{name}' was not installed; give it an environment of its own with: plughost plugins install --own-env … (it then runs isolated)")
            } else {
                String::new()
            };
            Err(Failure::failed(format!("{e}{own_hint}")))
        }
        Err(e) => Err(failed(e)),
    }
}

/// Build plugin `name`'s own environment on the CPython its
/// `requires-python` asks for, saying which was chosen.
fn build_own(
    home: &Path,
    name: &str,
    reqs: &Requirements,
    constraints: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, Failure> {
    let chosen = interpreter::choose(reqs.requires_python.as_deref()).map_err(Failure::failed)?;
    let why = match &reqs.requires_python {
        Some(rp) => format!(" for requires-python '{rp}'"),
        None => String::new(),
    };
    println!(
        "Its own environment runs on Python {} ({}{}){why}.",
        chosen.version_text(),
        chosen.path.display(),
        if chosen.embedded {
            ", the embedded one"
        } else {
            ""
        }
    );
    let mut extra = own::Extra::default();
    let uv = Uv::locate().map_err(failed)?;
    if !chosen.embedded {
        let (a, b, _) = chosen.version;
        let wheel = own::plughost_wheel(home, a, b);
        match &wheel {
            own::WorkerWheel::Local(path) => {
                println!("Its worker runs plughost's wheel {}.", path.display())
            }
            own::WorkerWheel::Index(requirement) => {
                // Asked alone first, so a failure is known to be plughost's
                // (the plugin's own requirements are resolved after).
                if !own::index_has(&uv, &chosen.path, requirement) {
                    return Err(Failure::failed(own::missing_wheel_hint(home, a, b)));
                }
                println!(
                    "Installing {requirement} from the package index for its worker: no wheel of plughost for Python {a}.{b} is in PLUGHOST_WHEELS, {} or beside this program.",
                    home.join("wheels").display()
                );
            }
        }
        extra.requirements.push(wheel.requirement());
        extra.only_binary.push("plughost".into());
    }
    let mut versions =
        own::build(home, &uv, name, reqs, &chosen.path, &extra, constraints).map_err(failed)?;
    // plughost is the host's, not the plugin's: never a locked version
    // (the next plughost installs its own).
    versions.remove("plughost");
    Ok(versions)
}

/// Write what `placed` says into `name`'s lock entry, and bring the
/// shared environment's versions up to date in every entry that uses it.
pub(super) fn record(home: &Path, name: &str, placed: &Placed) -> Result<(), Failure> {
    lock::update(home, |l| {
        if let Some(e) = l.plugins.get_mut(name) {
            e.environment = placed.environment.clone();
            e.requirements = placed.requirements.clone();
            e.dependencies = placed.versions.clone();
        }
        if let Some(shared) = &placed.shared_versions {
            for (n, e) in l.plugins.iter_mut() {
                if n != name && e.environment.as_deref() == Some("shared") {
                    e.dependencies = shared.clone();
                }
            }
        }
    })?;
    Ok(())
}

/// `plugins deps sync`: every user plugin's dependencies installed again —
/// its own environment rebuilt, the shared one resolved from all the rest —
/// and the lock entries brought up to date.
pub(super) fn sync(home: &Path) -> Result<Exit, Failure> {
    let isolation = config::read_isolation(home)?;
    let mut members = Vec::new();
    let mut owned = Vec::new();
    for (name, path) in others(home, "") {
        let requirements = deps::read(&path).map_err(failed)?;
        let wants_own = own::find(home, &name).is_some()
            || (isolation.covers(&name) && !requirements.is_empty());
        if wants_own {
            owned.push((name, requirements));
        } else {
            members.push(shared::Member { name, requirements });
        }
    }
    let mut failures = 0;
    for (name, reqs) in &owned {
        println!("{name}: its own environment");
        match build_own(home, name, reqs, &BTreeMap::new()) {
            Ok(versions) => record(
                home,
                name,
                &Placed {
                    environment: Some("own".into()),
                    requirements: reqs.requires.clone(),
                    versions,
                    shared_versions: None,
                },
            )?,
            Err(e) => {
                eprintln!("plughost: {name}: {}", e.message);
                failures += 1;
            }
        }
    }
    let needed = members.iter().any(|m| !m.requirements.is_empty());
    if needed || shared::site_dir(home).is_some() {
        let uv = Uv::locate().map_err(failed)?;
        let python = shared_python()?;
        let synced =
            shared::sync(home, &uv, &python, &members, None, &BTreeMap::new()).map_err(failed)?;
        for m in members.iter().filter(|m| !m.requirements.is_empty()) {
            record(
                home,
                &m.name,
                &Placed {
                    environment: Some("shared".into()),
                    requirements: m.requirements.requires.clone(),
                    versions: synced.versions.clone(),
                    shared_versions: None,
                },
            )?;
        }
        println!(
            "The shared environment {} holds {} package(s) for {} plugin(s).",
            shared::link(home).display(),
            synced.versions.len(),
            members
                .iter()
                .filter(|m| !m.requirements.is_empty())
                .count()
        );
    }
    Ok(Exit::ok_if(failures == 0))
}

/// The built-in tools' names (what a plugin's tool of the same name shadows).
pub(super) fn builtin_tool_names() -> Vec<String> {
    let Ok(scratch) = tempfile::tempdir() else {
        return Vec::new();
    };
    let Ok(ws) = crate::agent::tools::Workspace::new(scratch.path()) else {
        return Vec::new();
    };
    let mut names: Vec<String> =
        crate::agent::tools::builtin_tools(&ws, &crate::agent::tools::ToolLimits::default())
            .into_iter()
            .map(|t| t.spec.name)
            .collect();
    names.push("delegate".into());
    names
}

/// The install-time summary of what the plugin at `dir` will be able to do.
pub(super) fn print_risk(name: &str, caps: &lock::Capabilities, dir: &Path) {
    use crate::plugins::install::risk;
    let badges = risk::badges(caps, dir, &builtin_tool_names());
    println!("{}", risk::summary(name, &badges));
}

/// What a loaded plugin registered beyond its manifest's declarations.
pub(super) fn undeclared(
    p: &crate::host::PluginRecord,
    strict: bool,
) -> crate::plugins::install::risk::Undeclared {
    let declared = crate::plugins::manifest::load_with(&p.path, crate::dialects::formats())
        .map(|m| lock::Capabilities {
            hooks: m.provides_hooks,
            tools: m.provides_tools,
            web_providers: m.provides_web_providers,
        })
        .unwrap_or_default();
    crate::plugins::install::risk::Undeclared::between(&declared, &p.hooks, &p.tools, strict)
}

/// The environments section of `plugins doctor`, and each loaded
/// plugin's undeclared registrations; `None` when there is nothing to say.
pub(super) fn doctor_text(host: &crate::host::Host) -> Option<String> {
    let home = host.home();
    let mut lines = Vec::new();
    if let Some(site) = shared::site_dir(home) {
        lines.push(format!("shared environment: {}", site.display()));
    }
    for p in host.plugins().iter().filter(|p| p.loaded) {
        if let Some(own) = interpreter::describe(home, &p.key) {
            lines.push(format!("  {}: {own}", p.key));
        }
        let u = undeclared(p, false);
        if !u.is_empty() {
            lines.push(format!(
                "  {}: registers what its manifest does not declare: {}",
                p.key,
                u.describe()
            ));
        }
    }
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// After `plugins remove NAME`: its own environment deleted, and the shared
/// one resolved again without it (a failure is reported, not fatal: the
/// plugin is gone either way, and its packages only linger).
pub(super) fn forget(home: &Path, name: &str) {
    own::remove(home, name);
    if shared::site_dir(home).is_some() {
        if let Err(e) = resync_shared(home, name, None) {
            eprintln!(
                "plughost: the shared environment still holds the packages of '{name}': {}",
                e.message
            );
        }
    }
}

/// `environments` of `plugins doctor --json`: the shared environment (or
/// `null`), and by plugin key its own environment and undeclared
/// registrations; `None` (the key left out) when there is none of these.
pub(super) fn doctor_json(host: &crate::host::Host) -> Option<serde_json::Value> {
    let home = host.home();
    let strict = crate::plugins::install::risk::strict_hooks(home);
    let plugins: serde_json::Map<String, serde_json::Value> = host
        .plugins()
        .iter()
        .filter(|p| p.loaded)
        .filter_map(|p| {
            let u = undeclared(p, false);
            let own_env = own::find(home, &p.key);
            if u.is_empty() && own_env.is_none() {
                return None;
            }
            let value = serde_json::json!({
                "own_environment": own_env.map(|(dir, version)| serde_json::json!({"path": dir, "python": version})),
                "undeclared": {"hooks": u.hooks, "tools": u.tools},
            });
            Some((p.key.clone(), value))
        })
        .collect();
    let shared = shared::site_dir(home);
    if plugins.is_empty() && shared.is_none() {
        return None;
    }
    Some(serde_json::json!({
        "shared": shared,
        "strict_hooks": strict,
        "plugins": plugins,
    }))
}
