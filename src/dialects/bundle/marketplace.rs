//! Claude Code marketplaces: a directory or git repository with a
//! `.claude-plugin/marketplace.json` (`name`, `owner`, `plugins`: each a
//! `name` and a `source`), added with `plughost plugins marketplace add
//! SOURCE` and installed from with `plughost plugins install
//! NAME@MARKETPLACE`.
//!
//! The marketplaces a home knows are in `<home>/marketplaces.json`; a git
//! one is cloned into `<home>/marketplaces/<name>` (`update` pulls it), a
//! local directory is read where it is. A plugin's `source` is a path in
//! the marketplace (`./plugins/x`, under `metadata.pluginRoot` when that
//! is set), `{"source": "github", "repo": "owner/repo"}`, `{"source":
//! "url", "url": "…"}` or `{"source": "git-subdir", "url": "…", "path":
//! "…"}` (each with an optional `ref`/`sha`). Installing resolves it to an
//! ordinary `plugins install` source: a plugin inside a git marketplace is
//! installed from the marketplace's URL at the commit the clone is at
//! (`URL#path`, pinned), so the lock entry, content hash and drift check
//! are those of any install.
//!
//! A plugin directory without a manifest (Claude Code's is optional, and
//! a `strict: false` entry is the manifest) is installed from a copy
//! staged under `<home>/marketplaces/.staged/<name>` with a
//! `.claude-plugin/plugin.json` made of the entry's `name`, `version` and
//! `description` (its lock entry names that copy, not the marketplace).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where the marketplace file is, relative to its root.
pub const FILE: &str = ".claude-plugin/marketplace.json";

/// One marketplace a home knows.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Known {
    /// As the user gave it (a directory, or a git URL).
    pub source: String,
    /// Where it is read: the directory, or the clone.
    pub dir: PathBuf,
    /// A git URL to install its relative plugins from; `None`: local.
    #[serde(default)]
    pub git: Option<String>,
}

/// A plugin listed by a marketplace.
#[derive(Clone, Debug, Serialize)]
pub struct Listed {
    pub name: String,
    pub description: String,
    pub version: String,
    pub source: Value,
}

/// A marketplace's file, read.
#[derive(Clone, Debug)]
pub struct Marketplace {
    pub name: String,
    pub plugins: Vec<Listed>,
    plugin_root: String,
}

fn registry_file(home: &Path) -> PathBuf {
    home.join("marketplaces.json")
}

/// The marketplaces `home` knows, by name.
pub fn known(home: &Path) -> Result<BTreeMap<String, Known>, String> {
    let path = registry_file(home);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            serde_json::from_str(&text).map_err(|e| format!("{} is not valid: {e}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn save(home: &Path, all: &BTreeMap<String, Known>) -> Result<(), String> {
    std::fs::create_dir_all(home).map_err(|e| e.to_string())?;
    let path = registry_file(home);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(all).unwrap_or_default())
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Read the marketplace at `dir`.
pub fn read(dir: &Path) -> Result<Marketplace, String> {
    let path = dir.join(FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("no marketplace at {}: {e}", dir.display()))?;
    let json: Value = serde_json::from_str(text.trim_start_matches('\u{feff}'))
        .map_err(|e| format!("{FILE} is not valid JSON: {e}"))?;
    let name = json["name"].as_str().unwrap_or_default().to_string();
    if name.is_empty() || name.contains(['/', '@', ' ']) || name.starts_with('.') {
        return Err(format!("{FILE} needs a name without '/', '@' or spaces"));
    }
    let plugins = json["plugins"]
        .as_array()
        .ok_or(format!("{FILE} needs a plugins list"))?
        .iter()
        .filter_map(|p| {
            Some(Listed {
                name: p["name"].as_str()?.to_string(),
                description: p["description"].as_str().unwrap_or_default().to_string(),
                version: p["version"].as_str().unwrap_or_default().to_string(),
                source: p.get("source").cloned().unwrap_or(Value::Null),
            })
        })
        .collect();
    Ok(Marketplace {
        name,
        plugins,
        plugin_root: json["metadata"]["pluginRoot"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    })
}

fn is_git(source: &str) -> bool {
    ["https://", "http://", "ssh://", "git://", "file://"]
        .iter()
        .any(|p| source.starts_with(p))
        || (source.contains('@') && source.contains(':') && !source.contains("://"))
}

fn git(dir: Option<&Path>, args: &[&str]) -> Result<String, String> {
    let mut cmd = std::process::Command::new("git");
    if let Some(d) = dir {
        cmd.arg("-C").arg(d);
    }
    let out = cmd
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {} failed: {}",
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `plugins marketplace add SOURCE`: a directory (read in place) or a git
/// URL (cloned; `owner/repo` is GitHub's). Its name, from its file.
pub fn add(home: &Path, source: &str) -> Result<Marketplace, String> {
    let mut all = known(home)?;
    let local = Path::new(source);
    let (dir, git_url) = if !is_git(source) && local.is_dir() {
        (
            local.canonicalize().map_err(|e| format!("{source}: {e}"))?,
            None,
        )
    } else {
        let url = if is_git(source) {
            source.to_string()
        } else if source.split('/').count() == 2 && !source.starts_with('.') {
            format!("https://github.com/{source}.git")
        } else {
            return Err(format!("{source}: not a directory or a git URL"));
        };
        let into = home.join("marketplaces");
        std::fs::create_dir_all(&into).map_err(|e| e.to_string())?;
        let staging = tempfile::tempdir_in(&into).map_err(|e| e.to_string())?;
        let clone = staging.path().join("clone");
        git(
            None,
            &[
                "clone",
                "--quiet",
                "--depth",
                "1",
                &url,
                &clone.to_string_lossy(),
            ],
        )?;
        let name = read(&clone)?.name;
        let target = into.join(&name);
        if target.exists() {
            std::fs::remove_dir_all(&target).map_err(|e| e.to_string())?;
        }
        std::fs::rename(&clone, &target).map_err(|e| e.to_string())?;
        (target, Some(url))
    };
    let market = read(&dir)?;
    all.insert(
        market.name.clone(),
        Known {
            source: source.to_string(),
            dir,
            git: git_url,
        },
    );
    save(home, &all)?;
    Ok(market)
}

/// `plugins marketplace update [NAME]`: pull the git ones (all, or NAME)
/// and read each again; their names and plugin counts.
pub fn update(home: &Path, only: Option<&str>) -> Result<Vec<(String, usize)>, String> {
    let all = known(home)?;
    if let Some(name) = only {
        if !all.contains_key(name) {
            return Err(format!(
                "no marketplace named '{name}' (plugins marketplace list)"
            ));
        }
    }
    let mut out = Vec::new();
    for (name, k) in all.iter().filter(|(n, _)| only.is_none_or(|o| o == *n)) {
        if k.git.is_some() {
            git(Some(&k.dir), &["pull", "--quiet", "--ff-only"])
                .map_err(|e| format!("{name}: {e}"))?;
        }
        let m = read(&k.dir).map_err(|e| format!("{name}: {e}"))?;
        out.push((name.clone(), m.plugins.len()));
    }
    Ok(out)
}

/// Remove marketplace `name` (its clone too; installed plugins stay).
pub fn remove(home: &Path, name: &str) -> Result<(), String> {
    let mut all = known(home)?;
    let k = all
        .remove(name)
        .ok_or(format!("no marketplace named '{name}'"))?;
    if k.git.is_some() && k.dir.starts_with(home.join("marketplaces")) {
        std::fs::remove_dir_all(&k.dir).map_err(|e| e.to_string())?;
    }
    save(home, &all)
}

/// Whether `spec` names a plugin of a marketplace (`name@market`), and not
/// a git source (`git@host:…`, URLs).
pub fn is_marketplace_spec(spec: &str) -> Option<(&str, &str)> {
    if spec.contains(['/', ':']) || spec.starts_with('.') {
        return None;
    }
    let (plugin, market) = spec.split_once('@')?;
    (!plugin.is_empty() && !market.is_empty()).then_some((plugin, market))
}

/// What `plugins install NAME@MARKET` installs: a `plugins install`
/// source, and the commit to pin a git source at.
#[derive(Debug, PartialEq)]
pub struct Resolved {
    pub source: String,
    pub git_ref: Option<String>,
}

/// Resolve `plugin@market` against the marketplaces `home` knows.
pub fn resolve(home: &Path, plugin: &str, market: &str) -> Result<Resolved, String> {
    let all = known(home)?;
    let k = all.get(market).ok_or(format!(
        "no marketplace named '{market}': add it with plughost plugins marketplace add SOURCE"
    ))?;
    let m = read(&k.dir)?;
    let entry = m.plugins.iter().find(|p| p.name == plugin).ok_or(format!(
        "marketplace '{market}' lists no plugin '{plugin}' (it lists: {})",
        m.plugins
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    let pinned = |v: &Value| {
        v.get("sha")
            .or_else(|| v.get("ref"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match &entry.source {
        Value::String(rel) => {
            let rel = rel.strip_prefix("./").unwrap_or(rel);
            let rel = if m.plugin_root.is_empty() || rel.contains('/') {
                rel.to_string()
            } else {
                format!("{}/{rel}", m.plugin_root.trim_start_matches("./"))
            };
            let rel = rel.trim_end_matches('/');
            if Path::new(rel)
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
            {
                return Err(format!(
                    "{plugin}: its source '{rel}' leaves the marketplace"
                ));
            }
            let dir = k.dir.join(rel);
            if !dir.join(super::claude::MANIFEST).is_file() && !dir.join("plugin.json").is_file() {
                // No manifest of its own (Claude Code's manifest is
                // optional; a `strict: false` entry is the manifest): the
                // marketplace entry's fields become one, in a staged copy.
                return Ok(Resolved {
                    source: stage(home, &dir, entry)?.to_string_lossy().into_owned(),
                    git_ref: None,
                });
            }
            Ok(match &k.git {
                Some(url) => Resolved {
                    source: if rel.is_empty() {
                        url.clone()
                    } else {
                        format!("{url}#{rel}")
                    },
                    git_ref: Some(git(Some(&k.dir), &["rev-parse", "HEAD"])?),
                },
                None => Resolved {
                    source: dir.to_string_lossy().into_owned(),
                    git_ref: None,
                },
            })
        }
        Value::Object(o) => {
            let kind = o.get("source").and_then(Value::as_str).unwrap_or_default();
            let url = match kind {
                "github" => o
                    .get("repo")
                    .and_then(Value::as_str)
                    .map(|r| format!("https://github.com/{r}.git")),
                "url" | "git" | "git-subdir" => {
                    o.get("url").and_then(Value::as_str).map(str::to_string)
                }
                _ => None,
            }
            .ok_or(format!("{plugin}: source kind '{kind}' is not supported"))?;
            let source = match o.get("path").and_then(Value::as_str) {
                Some(p) if !p.is_empty() => format!("{url}#{}", p.trim_start_matches("./")),
                _ => url,
            };
            Ok(Resolved {
                source,
                git_ref: pinned(&entry.source),
            })
        }
        _ => Err(format!("{plugin}: its entry has no source")),
    }
}

/// A copy of the plugin at `dir` with a `.claude-plugin/plugin.json`
/// made from its marketplace entry, under `<home>/marketplaces/.staged`.
fn stage(home: &Path, dir: &Path, entry: &Listed) -> Result<PathBuf, String> {
    fn copy(from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(to)?;
        for e in std::fs::read_dir(from)? {
            let e = e?;
            let (src, dst) = (e.path(), to.join(e.file_name()));
            if e.file_name() == ".git" {
                continue;
            }
            if std::fs::metadata(&src)?.is_dir() {
                copy(&src, &dst)?;
            } else {
                std::fs::copy(&src, &dst)?;
            }
        }
        Ok(())
    }
    if !dir.is_dir() {
        return Err(format!("{}: no such plugin directory", dir.display()));
    }
    let staged = home.join("marketplaces/.staged").join(&entry.name);
    if staged.exists() {
        std::fs::remove_dir_all(&staged).map_err(|e| e.to_string())?;
    }
    copy(dir, &staged).map_err(|e| format!("cannot stage {}: {e}", dir.display()))?;
    let manifest = serde_json::json!({
        "name": entry.name, "version": entry.version, "description": entry.description,
    });
    std::fs::create_dir_all(staged.join(".claude-plugin")).map_err(|e| e.to_string())?;
    std::fs::write(staged.join(super::claude::MANIFEST), manifest.to_string())
        .map_err(|e| e.to_string())?;
    Ok(staged)
}

/// The CLI's `plugins marketplace …` and `plugins install NAME@MARKET`,
/// with this module's texts.
impl crate::dialects::abilities::Marketplaces for super::Bundle {
    fn add(&self, home: &Path, source: &str) -> Result<String, String> {
        let m = add(home, source)?;
        Ok(format!(
            "Added marketplace {} ({} plugins): install one with plughost plugins install NAME@{}",
            m.name,
            m.plugins.len(),
            m.name
        ))
    }

    fn list(&self, home: &Path, json: bool) -> Result<String, String> {
        let mut out = serde_json::Map::new();
        let mut text = String::new();
        for (name, k) in known(home)? {
            let plugins = read(&k.dir).map(|m| m.plugins);
            if json {
                out.insert(
                    name,
                    serde_json::json!({"source": k.source, "dir": k.dir,
                        "plugins": plugins.unwrap_or_default()}),
                );
                continue;
            }
            text.push_str(&format!("{name}  ({})\n", k.source));
            match plugins {
                Ok(list) => {
                    for p in list {
                        text.push_str(&format!("  {}@{name}  {}\n", p.name, p.description));
                    }
                }
                Err(e) => text.push_str(&format!("  (unreadable: {e})\n")),
            }
        }
        Ok(if json {
            Value::Object(out).to_string()
        } else {
            text.trim_end().to_string()
        })
    }

    fn update(&self, home: &Path, name: Option<&str>) -> Result<String, String> {
        Ok(update(home, name)?
            .into_iter()
            .map(|(n, count)| format!("Updated marketplace {n} ({count} plugins)"))
            .collect::<Vec<_>>()
            .join("\n"))
    }

    fn remove(&self, home: &Path, name: &str) -> Result<String, String> {
        remove(home, name)?;
        Ok(format!("Removed marketplace {name}"))
    }

    fn resolve(&self, home: &Path, spec: &str) -> Option<Result<(String, Option<String>), String>> {
        let (plugin, market) = is_marketplace_spec(spec)?;
        Some(resolve(home, plugin, market).map(|r| (r.source, r.git_ref)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_name_at_market_and_not_git_sources() {
        assert_eq!(is_marketplace_spec("kit@local"), Some(("kit", "local")));
        assert_eq!(is_marketplace_spec("git@github.com:o/r.git"), None);
        assert_eq!(is_marketplace_spec("o/r"), None);
        assert_eq!(is_marketplace_spec("kit"), None);
        assert_eq!(is_marketplace_spec("./x@y"), None);
    }

    #[test]
    fn a_local_marketplace_resolves_its_plugins_to_their_directories() {
        let home = tempfile::tempdir().unwrap();
        let m = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(m.path().join(".claude-plugin")).unwrap();
        std::fs::create_dir_all(m.path().join("plugins/kit/.claude-plugin")).unwrap();
        std::fs::write(
            m.path().join("plugins/kit/.claude-plugin/plugin.json"),
            "{}",
        )
        .unwrap();
        std::fs::create_dir_all(m.path().join("plugins/bare/commands")).unwrap();
        std::fs::write(m.path().join("plugins/bare/commands/x.md"), "X").unwrap();
        std::fs::write(
            m.path().join(FILE),
            serde_json::json!({"name": "local", "owner": {"name": "t"}, "plugins": [
                {"name": "kit", "source": "./plugins/kit"},
                {"name": "far", "source": {"source": "github", "repo": "o/r", "ref": "v1"}},
                {"name": "bad", "source": "../x"},
                {"name": "bare", "source": "./plugins/bare", "version": "0.2.0"}
            ]})
            .to_string(),
        )
        .unwrap();
        let added = add(home.path(), m.path().to_str().unwrap()).unwrap();
        assert_eq!(added.name, "local");
        let r = resolve(home.path(), "kit", "local").unwrap();
        assert!(r.source.ends_with("plugins/kit"), "{r:?}");
        let far = resolve(home.path(), "far", "local").unwrap();
        assert_eq!(far.source, "https://github.com/o/r.git");
        assert_eq!(far.git_ref.as_deref(), Some("v1"));
        assert!(resolve(home.path(), "bad", "local").is_err());
        let e = resolve(home.path(), "nope", "local").unwrap_err();
        assert!(e.contains("it lists: kit, far, bad, bare"), "{e}");
        // No manifest: a staged copy with one made of the entry.
        let bare = resolve(home.path(), "bare", "local").unwrap();
        let staged = Path::new(&bare.source);
        assert!(staged.starts_with(home.path()), "{bare:?}");
        let manifest =
            std::fs::read_to_string(staged.join(super::super::claude::MANIFEST)).unwrap();
        assert!(manifest.contains("\"version\":\"0.2.0\""), "{manifest}");
        assert!(staged.join("commands/x.md").is_file());
        assert!(resolve(home.path(), "kit", "other").is_err());
        assert_eq!(
            update(home.path(), None).unwrap(),
            vec![("local".into(), 4)]
        );
    }
}
