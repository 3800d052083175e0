//! The lock file at the command line: recording installs, `plugins accept`,
//! `plugins install --from-lock`, and the `lock` key of `plugins list --json`.

use std::path::Path;

use serde_json::Value;

use super::exit::{Exit, Failure};
use super::RESTART;
use crate::plugins::config;
use crate::plugins::install::{self, Installed};
use crate::plugins::lock::{self, Drift, LockError};

impl From<LockError> for Failure {
    fn from(e: LockError) -> Failure {
        Failure::failed(e.to_string())
    }
}

/// The dialect a just-installed plugin loads through: `--dialect`, else
/// what its files show.
fn dialect_of(done: &Installed, explicit: Option<&str>) -> String {
    if let Some(d) = explicit {
        return d.to_string();
    }
    let natural = if done.dialect == crate::dialects::formats().default_id() {
        crate::dialects::sniff(&done.path).unwrap_or(done.dialect)
    } else {
        done.dialect
    };
    natural.to_string()
}

/// Write `done`'s lock entry, and say so.
pub(super) fn record(home: &Path, done: &Installed, dialect: Option<&str>) -> Result<(), Failure> {
    let entry = done.lock_entry(&dialect_of(done, dialect));
    let what = match (&entry.commit, entry.editable) {
        (_, true) => "editable: its changes are not checked".to_string(),
        (Some(commit), _) => format!("commit {commit}"),
        (None, _) => entry.hash.clone().unwrap_or_default(),
    };
    lock::update(home, |l| {
        l.plugins.insert(done.name.clone(), entry);
    })?;
    println!("Recorded in {} ({what}).", lock::lock_path(home).display());
    Ok(())
}

/// Drop `name`'s entry after `plugins remove` (a lock that cannot be
/// edited is reported, not replaced).
pub(super) fn forget(home: &Path, name: &str) {
    let has = lock::read(home).map(|l| l.plugins.contains_key(name));
    let result = match has {
        Ok(false) => Ok(()),
        Ok(true) => lock::update(home, |l| {
            l.plugins.remove(name);
        }),
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        eprintln!("plughost: could not drop '{name}' from the lock file: {e}");
    }
}

pub(super) fn with_lock_entries(home: &Path, records: impl serde::Serialize) -> Value {
    lock::with_entries(home, records)
}

/// `plugins accept NAME`: show which files changed since `NAME`'s lock
/// entry and record them as they are now.
pub(super) fn accept(home: &Path, name: &str) -> Result<Exit, Failure> {
    let path = lock::lock_path(home);
    let current = lock::read(home)?;
    let Some(entry) = current.plugins.get(name) else {
        return Err(Failure::failed(format!(
            "'{name}' has no entry in {}; only plugins installed with plughost plugins install are recorded",
            path.display()
        )));
    };
    if entry.editable {
        println!("{name} is an editable install; its changes are not checked.");
        return Ok(Exit::Success);
    }
    let dir = home.join("plugins").join(name);
    let content = lock::content_hash(&dir)
        .map_err(|e| Failure::failed(format!("cannot read {} to hash it: {e}", dir.display())))?;
    if entry.hash.as_deref() == Some(content.hash.as_str()) {
        println!("Nothing changed in {name} since it was recorded.");
        return Ok(Exit::Success);
    }
    let drift = Drift::between(&entry.files, &content.files);
    println!("Changed in {name} since it was recorded:");
    for (what, files) in [
        ("modified", &drift.modified),
        ("added", &drift.added),
        ("removed", &drift.removed),
    ] {
        for file in files {
            println!("  {what}: {file}");
        }
    }
    let manifest = crate::plugins::manifest::load_with(&dir, crate::dialects::formats()).ok();
    lock::update(home, |l| {
        if let Some(e) = l.plugins.get_mut(name) {
            e.hash = Some(content.hash.clone());
            e.files = content.files.clone();
            if let Some(m) = manifest {
                e.version = m.version;
                e.capabilities = lock::Capabilities {
                    hooks: m.provides_hooks,
                    tools: m.provides_tools,
                    web_providers: m.provides_web_providers,
                };
            }
        }
    })?;
    println!(
        "Accepted: recorded {} for {name} in {}.",
        content.hash,
        path.display()
    );
    println!("{RESTART}");
    Ok(Exit::Success)
}

/// `plugins install --from-lock FILE`: every entry of FILE into this home,
/// at its commit, each refused (the others still installed) when its files
/// do not hash to what FILE records.
pub(super) fn from_lock(
    home: &Path,
    file: &Path,
    force: bool,
    enable: bool,
) -> Result<Exit, Failure> {
    let wanted = lock::read_file(file)?;
    lock::read(home)?;
    if enable {
        config::read_plugin_lists(home)?;
    }
    let (mut done, mut failed) = (0usize, 0usize);
    for (name, entry) in &wanted.plugins {
        match install_entry(home, name, entry, force, enable) {
            Ok(()) => done += 1,
            Err(e) => {
                eprintln!("plughost: {name}: {}", e.message);
                failed += 1;
            }
        }
    }
    println!(
        "Installed {done} of {} plugins from {}.",
        wanted.plugins.len(),
        file.display()
    );
    if done > 0 {
        println!("{RESTART}");
    }
    Ok(Exit::ok_if(failed == 0))
}

fn install_entry(
    home: &Path,
    name: &str,
    entry: &lock::LockEntry,
    force: bool,
    enable: bool,
) -> Result<(), Failure> {
    let spec = install::parse_source(&entry.source)?;
    let ask = super::deps::Ask {
        home,
        own_env: entry.environment.as_deref() == Some("own"),
        constraints: &entry.dependencies,
        placed: Default::default(),
    };
    let prepare = |dir: &Path, name: &str| ask.run(dir, name);
    let options = install::Options {
        force,
        git_ref: entry.commit.as_deref(),
        expect_hash: entry.hash.as_deref().filter(|_| !entry.editable),
        editable: entry.editable,
        prepare: Some(install::Prepare(&prepare)),
    };
    let done = install::install_with(home, &spec, &options, crate::dialects::formats())?;
    if done.name != name {
        tracing::warn!(
            "the lock file's entry '{name}' installed a plugin named '{}'",
            done.name
        );
    }
    println!("Installed {} in {}.", done.name, done.path.display());
    // The dialect the entry records, in config.json when the plugin's own
    // files would not say it.
    let explicit = (dialect_of(&done, None) != entry.dialect).then_some(entry.dialect.as_str());
    if let Some(d) = explicit {
        if crate::dialects::by_name(d).is_none() {
            return Err(Failure::failed(format!(
                "the lock file names the dialect '{d}', which this build does not have"
            )));
        }
        config::set_dialect(home, &done.name, d)?;
    }
    record(home, &done, Some(entry.dialect.as_str()))?;
    super::deps::record(home, &done.name, &ask.placed.borrow())?;
    if enable {
        config::enable_plugin(home, &done.name)?;
    }
    Ok(())
}

/// What `plugins doctor` says of one entry: is it as recorded.
fn state_of(home: &Path, name: &str, entry: &lock::LockEntry) -> String {
    let dir = home.join("plugins").join(name);
    if !(dir.exists()) {
        return "missing (the entry names no installed plugin)".into();
    }
    match lock::check(Some(entry), &dir) {
        lock::Check::Unlocked | lock::Check::Unchanged => "unchanged".into(),
        lock::Check::Editable => "editable (not checked)".into(),
        lock::Check::Changed { drift, .. } => format!(
            "changed ({}): run plughost plugins accept {name}",
            drift.summary()
        ),
        lock::Check::Unreadable(e) => format!("unreadable: {e}"),
    }
}

/// `lock` of `plugins doctor --json`: the file, why it cannot be read (or
/// `null`), and each entry with its `state`.
pub(super) fn doctor_json(home: &Path) -> Value {
    let (error, plugins) = match lock::read(home) {
        Ok(l) => (Value::Null, l.plugins),
        Err(e) => (Value::from(e.to_string()), Default::default()),
    };
    let entries: serde_json::Map<String, Value> = plugins
        .iter()
        .map(|(name, entry)| {
            let value = serde_json::json!({
                "source": entry.source,
                "commit": entry.commit,
                "hash": entry.hash,
                "editable": entry.editable,
                "state": state_of(home, name, entry),
            });
            (name.clone(), value)
        })
        .collect();
    serde_json::json!({
        "file": lock::lock_path(home),
        "error": error,
        "plugins": entries,
    })
}

/// The lock section of `plugins doctor`; `None` when there is no entry
/// and nothing wrong with the file.
pub(super) fn doctor_text(home: &Path) -> Option<String> {
    let path = lock::lock_path(home);
    let lock = match lock::read(home) {
        Ok(l) if l.plugins.is_empty() => return None,
        Ok(l) => l,
        Err(e) => return Some(format!("lock file: {e}")),
    };
    let mut text = format!("lock file: {}", path.display());
    for (name, entry) in &lock.plugins {
        let at = match (&entry.commit, &entry.hash) {
            (Some(c), _) => format!("commit {c}"),
            (None, Some(h)) => h.clone(),
            (None, None) => entry.source.clone(),
        };
        text.push_str(&format!(
            "\n  {name}: {at}, {}",
            state_of(home, name, entry)
        ));
    }
    Some(text)
}
