//! Installed entry points, read straight from `entry_points.txt` files.
//!
//! `importlib.metadata.entry_points()` builds a `Distribution` for every
//! package on `sys.path` and parses its metadata: tens of milliseconds on a
//! populated site-packages, paid by every `plugins list`. The entry points
//! of a group need far less: list each `sys.path` directory once, open the
//! `entry_points.txt` of its `*.dist-info` / `*.egg-info` directories, and
//! keep the lines of that group. Names and versions come from the metadata
//! directory's name (the wheel spec fixes `{name}-{version}.dist-info`);
//! only a directory without a version in its name (a development
//! `.egg-info`) has its `PKG-INFO`/`METADATA` headers read.
//!
//! A malformed file is reported as a [`Problem`] naming the file and the
//! line, and the rest of the scan goes on.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::plugins::atomic::{file_stamp, FileStamp};

/// One entry point of the requested group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryPoint {
    /// The distribution's name as its metadata directory spells it
    /// (`felix_plugin_example`).
    pub distribution: String,
    /// Its version; empty when the metadata does not say.
    pub version: String,
    /// The `sys.path` directory the distribution is installed in.
    pub location: PathBuf,
    /// Its `*.dist-info` / `*.egg-info` directory (for further metadata).
    pub metadata_dir: PathBuf,
    /// The entry point's name (the left-hand side).
    pub name: String,
    /// `module:attr[.attr]`, extras stripped.
    pub value: String,
}

impl EntryPoint {
    /// The module part of the value.
    pub fn module(&self) -> &str {
        self.value.split(':').next().unwrap_or_default()
    }
    /// The attribute path after `:`, if any.
    pub fn attr(&self) -> Option<&str> {
        self.value.split_once(':').map(|(_, a)| a)
    }
}

/// A file that could not be read or parsed (whole or in part).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    /// What is wrong, with the line number when one line is at fault.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.message)
    }
}

/// What a scan found.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// In `sys.path` order; within a directory, by metadata directory name.
    pub entries: Vec<EntryPoint>,
    pub problems: Vec<Problem>,
}

/// The entry points of `group` in the distributions installed in `dirs`
/// (`sys.path` order). A distribution found in several directories counts
/// once, where it is first found, as Python's own lookup does.
pub fn scan(dirs: &[PathBuf], group: &str) -> Scan {
    let mut scan = Scan::default();
    let mut seen = HashSet::new();
    for dir in dirs {
        let Some(listing) = listing(dir) else {
            continue; // a missing or unreadable sys.path entry (a zip, a typo): nothing installed there
        };
        for dist in listing.iter() {
            if !seen.insert(normalize(&dist.distribution)) {
                continue;
            }
            let file = dist.meta.join("entry_points.txt");
            let text = match &dist.text {
                Ok(text) => text,
                Err(message) => {
                    scan.problems.push(Problem {
                        file,
                        message: message.clone(),
                    });
                    continue;
                }
            };
            let (found, problems) = parse_group(text, group);
            scan.problems
                .extend(problems.into_iter().map(|message| Problem {
                    file: file.clone(),
                    message,
                }));
            scan.entries
                .extend(found.into_iter().map(|(name, value)| EntryPoint {
                    distribution: dist.distribution.clone(),
                    version: dist.version.clone(),
                    location: dir.clone(),
                    metadata_dir: dist.meta.clone(),
                    name,
                    value,
                }));
        }
    }
    scan
}

/// A distribution with an `entry_points.txt`, as a directory listing found it.
struct Distribution {
    meta: PathBuf,
    distribution: String,
    version: String,
    /// The file's text, or why it cannot be used.
    text: Result<String, String>,
    /// For an `.egg-info` (a development install, whose files `pip install
    /// -e` rewrites in place, leaving the directory listing as it was):
    /// the file as it was read, checked again at each use.
    rewritable: Option<FileStamp>,
}

/// What identifies a version of a directory's listing: a metadata
/// directory added, removed or replaced (an install, an upgrade) changes
/// the directory's modification time, and adding or removing one its link
/// count (which tells two changes apart within one tick of the clock).
type Stamp = (std::time::SystemTime, u64, u64);

fn stamp_of(dir: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).ok()?;
    Some((m.modified().ok()?, m.ino(), m.nlink()))
}

/// The distributions with entry points installed in `dir`, by metadata
/// directory name; `None` when `dir` cannot be listed. Kept for the
/// process while the directory is unchanged: one start asks for several
/// groups (Hermes plugins and memory providers, Felix plugins) and
/// `plugins list` asks again for its stray-entry check, and each scan
/// listed every `sys.path` directory and read every `entry_points.txt`.
fn listing(dir: &Path) -> Option<std::sync::Arc<Vec<Distribution>>> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    type Cache = Mutex<HashMap<PathBuf, (Stamp, Arc<Vec<Distribution>>)>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let stamp = stamp_of(dir)?;
    let cache = CACHE.get_or_init(Default::default);
    if let Some((seen, found)) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(dir) {
        let unchanged = |d: &Distribution| {
            d.rewritable
                .is_none_or(|was| file_stamp(&d.meta.join("entry_points.txt")) == Some(was))
        };
        if *seen == stamp && found.iter().all(unchanged) {
            return Some(found.clone());
        }
    }
    let found = Arc::new(read_listing(dir)?);
    // Stamped as it was before the read: a change during it reads again.
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(dir.to_path_buf(), (stamp, found.clone()));
    Some(found)
}

fn read_listing(dir: &Path) -> Option<Vec<Distribution>> {
    let listing = std::fs::read_dir(dir).ok()?;
    // The listing's own entry types (no `stat` each): a site-packages
    // holds a hundred metadata directories and more, most without entry
    // points. A symbolic link is followed.
    let mut metas: Vec<PathBuf> = listing
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name();
            Path::new(&name)
                .extension()
                .is_some_and(|x| x == "dist-info" || x == "egg-info")
                && e.file_type()
                    .is_ok_and(|t| t.is_dir() || (t.is_symlink() && e.path().is_dir()))
        })
        .map(|e| e.path())
        .collect();
    metas.sort();
    let mut found = Vec::new();
    for meta in metas {
        let file = meta.join("entry_points.txt");
        // Opened straight away (most have none: one failed open, where a
        // look first made it a `stat` and an open, and a `stat` of the
        // metadata directory before that); what is not a regular file is
        // refused once opened (without waiting on a FIFO) and, as before,
        // is no entry points file.
        let (text, stamp) = match crate::plugins::atomic::read_regular_head(&file, true, u64::MAX) {
            Ok((bytes, meta)) => (
                String::from_utf8(bytes)
                    .map_err(|_| "is not UTF-8 text; its entry points are ignored".to_string()),
                crate::plugins::atomic::stamp_of_metadata(&meta),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) if !file.is_file() => continue,
            Err(e) => (
                Err(format!(
                    "cannot be read ({e}); its entry points are ignored"
                )),
                file_stamp(&file),
            ),
        };
        let (distribution, version) = distribution_of(&meta);
        // Stamped from what was read (the metadata of the opened file,
        // taken before its read): a rewrite after it reads again.
        let rewritable = if meta.extension().is_some_and(|x| x == "egg-info") {
            stamp
        } else {
            None
        };
        found.push(Distribution {
            meta,
            distribution,
            version,
            text,
            rewritable,
        });
    }
    Some(found)
}

/// `(name, value)` pairs of `group` in an `entry_points.txt`, and the
/// problems of lines that could not be read (`line N: …`).
fn parse_group(text: &str, group: &str) -> (Vec<(String, String)>, Vec<String>) {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    let mut section: Option<&str> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let n = n + 1;
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            match line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                Some(name) if !name.trim().is_empty() => section = Some(name.trim()),
                _ => {
                    problems.push(format!(
                        "line {n}: '{line}' is not a [section] header; the lines up to the next header are ignored"
                    ));
                    section = None;
                }
            }
            continue;
        }
        // Only the requested group is judged: other tools' groups are theirs.
        let Some(current) = section else {
            if raw.starts_with(char::is_whitespace) {
                continue; // a continuation line of an ignored entry
            }
            problems.push(format!(
                "line {n}: '{line}' comes before any [group] header and is ignored"
            ));
            continue;
        };
        if current != group {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            problems.push(format!(
                "line {n}: '{line}' is not 'name = module:attr'; it is ignored"
            ));
            continue;
        };
        let name = name.trim();
        // Extras (`mod:attr [extra1,extra2]`) do not change what is loaded.
        let value = value.split('[').next().unwrap_or_default().trim();
        if name.is_empty() {
            problems.push(format!(
                "line {n}: an entry point without a name; it is ignored"
            ));
            continue;
        }
        if let Err(why) = check_value(value) {
            problems.push(format!(
                "line {n}: entry point '{name}' = '{value}' {why}; it is ignored"
            ));
            continue;
        }
        found.push((name.to_string(), value.to_string()));
    }
    (found, problems)
}

/// A value must be `module[.sub]` optionally followed by `:attr[.attr]`,
/// every part a Python identifier.
fn check_value(value: &str) -> Result<(), &'static str> {
    let (module, attr) = match value.split_once(':') {
        Some((m, a)) => (m.trim(), Some(a.trim())),
        None => (value, None),
    };
    let dotted = |s: &str| !s.is_empty() && s.split('.').all(is_identifier);
    if !dotted(module) {
        return Err("does not name a module (expected 'module:attr')");
    }
    if attr.is_some_and(|a| !dotted(a)) {
        return Err("does not name an attribute after ':' (expected 'module:attr')");
    }
    Ok(())
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

/// Name and version of the distribution of a metadata directory.
fn distribution_of(meta: &Path) -> (String, String) {
    let stem = meta
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    // `{name}-{version}[-pyX.Y]`: names and versions never hold '-' there.
    let mut parts = stem.splitn(3, '-');
    let name = parts.next().unwrap_or_default().to_string();
    match parts.next() {
        Some(version) if !version.is_empty() => (name, version.to_string()),
        _ => {
            let headers = ["METADATA", "PKG-INFO"]
                .iter()
                .find_map(|f| std::fs::read_to_string(meta.join(f)).ok())
                .unwrap_or_default();
            let header = |key: &str| {
                headers
                    .lines()
                    .take_while(|l| !l.is_empty())
                    .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
            };
            (
                header("Name:").unwrap_or(name),
                header("Version:").unwrap_or_default(),
            )
        }
    }
}

/// PEP 503 normalisation, so `Foo_Bar` and `foo-bar` are one distribution.
fn normalize(name: &str) -> String {
    name.to_ascii_lowercase().replace(['-', '.'], "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(site: &Path, dir: &str, entry_points: &str) -> PathBuf {
        let meta = site.join(dir);
        std::fs::create_dir_all(&meta).unwrap();
        std::fs::write(meta.join("entry_points.txt"), entry_points).unwrap();
        meta
    }

    #[test]
    fn reads_the_group_of_each_distribution_with_name_version_and_location() {
        let site = tempfile::tempdir().unwrap();
        let s = site.path().to_path_buf();
        dist(
            &s,
            "felix_plugin_example-0.1.0.dist-info",
            "[console_scripts]\nfx = felix_plugin_example.cli:main\n\n[felix.plugins]\nexample = felix_plugin_example:register\nother = pkg.sub:obj.register [extra]\n",
        );
        dist(
            &s,
            "unrelated-2.0.dist-info",
            "[console_scripts]\nu = u:main\n",
        );
        let scan = scan(std::slice::from_ref(&s), "felix.plugins");
        assert!(scan.problems.is_empty(), "{:?}", scan.problems);
        assert_eq!(scan.entries.len(), 2);
        let e = &scan.entries[0];
        assert_eq!(
            (e.distribution.as_str(), e.version.as_str(), e.name.as_str()),
            ("felix_plugin_example", "0.1.0", "example")
        );
        assert_eq!(e.value, "felix_plugin_example:register");
        assert_eq!(e.location, s);
        assert_eq!(scan.entries[1].value, "pkg.sub:obj.register");
        assert_eq!(scan.entries[1].module(), "pkg.sub");
        assert_eq!(scan.entries[1].attr(), Some("obj.register"));
    }

    #[test]
    fn a_development_egg_info_takes_name_and_version_from_its_headers() {
        let site = tempfile::tempdir().unwrap();
        let meta = dist(
            site.path(),
            "my_plugin.egg-info",
            "[felix.plugins]\nmine = my_plugin:register\n",
        );
        std::fs::write(
            meta.join("PKG-INFO"),
            "Metadata-Version: 2.1\nName: my-plugin\nVersion: 3.2.1\n\nbody",
        )
        .unwrap();
        let scan = scan(&[site.path().to_path_buf()], "felix.plugins");
        assert_eq!(scan.entries[0].distribution, "my-plugin");
        assert_eq!(scan.entries[0].version, "3.2.1");
    }

    #[test]
    fn the_first_directory_holding_a_distribution_wins() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        dist(
            a.path(),
            "My_Plugin-1.0.dist-info",
            "[felix.plugins]\nx = a:register\n",
        );
        dist(
            b.path(),
            "my_plugin-2.0.dist-info",
            "[felix.plugins]\nx = b:register\n",
        );
        let scan = scan(&[a.path().into(), b.path().into()], "felix.plugins");
        assert_eq!(scan.entries.len(), 1);
        assert_eq!(scan.entries[0].value, "a:register");
    }

    #[test]
    fn malformed_files_give_one_problem_per_fault_and_keep_their_good_lines() {
        let site = tempfile::tempdir().unwrap();
        let s = site.path();
        dist(
            s,
            "bad-1.0.dist-info",
            "stray = before:header\n[felix.plugins\n[felix.plugins]\nno equals sign\n = nameless:register\nbad = 1mod:register\nworse = mod:\ngood = fine:register\n",
        );
        let meta = s.join("binary-1.0.dist-info");
        std::fs::create_dir_all(&meta).unwrap();
        std::fs::write(meta.join("entry_points.txt"), [0xff, 0xfe, 0x00]).unwrap();
        let scan = scan(&[s.to_path_buf(), s.join("missing")], "felix.plugins");
        assert_eq!(scan.entries.len(), 1);
        assert_eq!(scan.entries[0].name, "good");
        let messages: Vec<String> = scan.problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(messages.len(), 7, "{messages:#?}");
        assert!(
            messages[0].contains("line 1: 'stray = before:header' comes before any [group] header")
        );
        assert!(messages[1].contains("line 2: '[felix.plugins' is not a [section] header"));
        assert!(messages[2].contains("line 4: 'no equals sign' is not 'name = module:attr'"));
        assert!(messages[3].contains("line 5: an entry point without a name"));
        assert!(messages[4]
            .contains("line 6: entry point 'bad' = '1mod:register' does not name a module"));
        assert!(
            messages[5].contains("line 7: entry point 'worse' = 'mod:' does not name an attribute")
        );
        assert!(messages[6].contains("binary-1.0.dist-info") && messages[6].contains("not UTF-8"));
    }

    #[test]
    fn metadata_directories_without_entry_points_and_other_groups_are_ignored() {
        let site = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(site.path().join("plain-1.0.dist-info")).unwrap();
        dist(
            site.path(),
            "other-1.0.dist-info",
            "[pytest11]\nbroken line\n",
        );
        let scan = scan(&[site.path().to_path_buf()], "felix.plugins");
        assert!(
            scan.entries.is_empty() && scan.problems.is_empty(),
            "{scan:?}"
        );
    }

    /// What is not a regular `entry_points.txt` (a FIFO, a directory) is
    /// skipped without a problem and without waiting on the FIFO; a
    /// metadata directory reached through a symbolic link is read; a plain
    /// file named like a metadata directory is not one.
    #[test]
    fn special_files_are_skipped_and_a_linked_metadata_directory_is_read() {
        let site = tempfile::tempdir().unwrap();
        let fifo = site.path().join("piped-1.0.dist-info");
        std::fs::create_dir_all(&fifo).unwrap();
        let name = std::ffi::CString::new(
            fifo.join("entry_points.txt")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: `name` is a NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        std::fs::create_dir_all(site.path().join("dir-1.0.dist-info/entry_points.txt")).unwrap();
        std::fs::write(site.path().join("flat-1.0.egg-info"), "not a directory").unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let target = dist(
            elsewhere.path(),
            "linked-2.0.dist-info",
            "[felix.plugins]\nlinked = linked:register\n",
        );
        std::os::unix::fs::symlink(&target, site.path().join("linked-2.0.dist-info")).unwrap();
        let scan = scan(&[site.path().to_path_buf()], "felix.plugins");
        assert!(scan.problems.is_empty(), "{:?}", scan.problems);
        let names: Vec<_> = scan.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["linked"]);
    }

    /// A development `.egg-info` whose `entry_points.txt` is rewritten in
    /// place (the directory's listing unchanged) is read again.
    #[test]
    fn an_egg_info_rewritten_in_place_is_read_again() {
        let site = tempfile::tempdir().unwrap();
        let dirs = [site.path().to_path_buf()];
        let meta = dist(
            site.path(),
            "dev_plugin.egg-info",
            "[felix.plugins]\nfirst = dev_plugin:register\n",
        );
        assert_eq!(scan(&dirs, "felix.plugins").entries[0].name, "first");
        std::fs::write(
            meta.join("entry_points.txt"),
            "[felix.plugins]\nsecond_name = dev_plugin:register\n",
        )
        .unwrap();
        assert_eq!(scan(&dirs, "felix.plugins").entries[0].name, "second_name");
    }
}
