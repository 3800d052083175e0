//! One host build's view of the plugin directories: each file read, each
//! directory listed and each path looked up once per build.
//!
//! A build looks at every plugin directory from several places that know
//! nothing of each other: discovery (is it a plugin, its manifest), each
//! dialect's sniff (manifest fields, its Python sources), the guard and
//! strict-hooks checks, the reload stamp, the dialect's load. Each used to
//! go to the file system on its own: with 100 plugins, `plugins list` made
//! about 75 system calls a plugin where a minimal loader makes 12. Inside a
//! [`Scope`] (a build on this thread) the first look is kept and every
//! later one gets the same answer, so the build also sees one consistent
//! version of each file. Outside a scope every call goes to the file
//! system, as before.
//!
//! The view is per thread: a build runs on one thread, and another
//! thread's build (a second host, a reload) keeps its own. A build that
//! has a helper thread look ahead (discovery while the interpreter starts,
//! see `host::build`) takes over what it saw with [`looking`] and
//! [`adopt`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::FileType;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// A directory entry as listed: its name and its type (a symbolic link's
/// own type; [`is_file`] and [`is_dir`] follow it).
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: OsString,
    pub file_type: FileType,
}

/// Files up to this size are kept for the build (manifests, sources).
const KEEP_FILES_UP_TO: usize = 256 * 1024;

type Kept<T> = Result<T, (io::ErrorKind, String)>;

#[derive(Default)]
struct View {
    // Keyed by the path's bytes: hashing a `Path` parses its components.
    files: HashMap<OsString, Kept<Arc<[u8]>>>,
    listings: HashMap<OsString, Kept<Arc<[Entry]>>>,
    metadata: HashMap<OsString, Kept<std::fs::Metadata>>,
    /// Values made from file contents, by what made them and the contents.
    derived: HashMap<(&'static str, String), Arc<dyn std::any::Any + Send + Sync>>,
}

thread_local! {
    /// The open scopes on this thread and their view.
    static VIEW: RefCell<(usize, Option<View>)> = const { RefCell::new((0, None)) };
}

/// While alive, this thread's looks at plugin files are kept (see the
/// module docs). Scopes nest: an inner one shares the outer's view.
pub struct Scope {
    // Tied to the thread whose view it opened.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Scope {
    pub fn enter() -> Scope {
        VIEW.with(|v| {
            let mut v = v.borrow_mut();
            v.0 += 1;
            if v.1.is_none() {
                v.1 = Some(View::default());
            }
        });
        Scope {
            _thread: std::marker::PhantomData,
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        VIEW.with(|v| {
            let mut v = v.borrow_mut();
            v.0 -= 1;
            if v.0 == 0 {
                v.1 = None;
            }
        });
    }
}

/// What a helper thread's [`looking`] saw, for the build's thread to
/// [`adopt`].
#[derive(Default)]
pub struct Looked(Option<View>);

/// Run `work` in a view of its own on this thread (a helper's, with no
/// scope open) and hand over what it saw. On a thread that already has a
/// scope open, `work` uses that view and nothing is handed over: it stays
/// where it is.
pub fn looking<R>(work: impl FnOnce() -> R) -> (R, Looked) {
    let nested = in_scope();
    let scope = Scope::enter();
    let result = work();
    let view = if nested {
        None
    } else {
        VIEW.with(|v| v.borrow_mut().1.take())
    };
    drop(scope);
    (result, Looked(view))
}

/// Add what a helper saw ([`looking`]) to this thread's view; what this
/// thread saw itself is kept. Nothing is kept outside a scope.
pub fn adopt(looked: Looked) {
    let Some(theirs) = looked.0 else {
        return;
    };
    fn fill<K: Eq + std::hash::Hash, V>(ours: &mut HashMap<K, V>, theirs: HashMap<K, V>) {
        for (k, x) in theirs {
            ours.entry(k).or_insert(x);
        }
    }
    VIEW.with(|v| {
        if let Some(ours) = v.borrow_mut().1.as_mut() {
            fill(&mut ours.files, theirs.files);
            fill(&mut ours.listings, theirs.listings);
            fill(&mut ours.metadata, theirs.metadata);
            fill(&mut ours.derived, theirs.derived);
        }
    });
}

fn keep<T>(r: io::Result<T>) -> Kept<T> {
    r.map_err(|e| (e.kind(), e.to_string()))
}

fn give<T>(k: Kept<T>) -> io::Result<T> {
    k.map_err(|(kind, text)| io::Error::new(kind, text))
}

/// `look` through the view when a scope is open (kept in `table` under
/// `path`), else straight to the file system.
fn through<T: Clone>(
    path: &Path,
    table: fn(&mut View) -> &mut HashMap<OsString, Kept<T>>,
    look: impl FnOnce(&Path) -> io::Result<T>,
    worth_keeping: fn(&T) -> bool,
) -> io::Result<T> {
    let kept = VIEW.with(|v| {
        v.borrow_mut()
            .1
            .as_mut()
            .map(|view| table(view).get(path.as_os_str()).cloned())
    });
    match kept {
        None => look(path),
        Some(Some(k)) => give(k),
        Some(None) => {
            let k = keep(look(path));
            if k.as_ref().map_or(true, worth_keeping) {
                VIEW.with(|v| {
                    if let Some(view) = v.borrow_mut().1.as_mut() {
                        table(view).insert(path.as_os_str().to_owned(), k.clone());
                    }
                });
            }
            give(k)
        }
    }
}

/// [`crate::plugins::atomic::read_regular`]: the regular file at `path`,
/// whole (a FIFO or device refused unopened).
pub fn read_regular(path: &Path) -> io::Result<Arc<[u8]>> {
    through(
        path,
        |v| &mut v.files,
        |p| read_noting(p, u64::MAX).map(|(bytes, _)| bytes),
        // A big file (a vendored module, a data file) is read again
        // rather than held for the whole build.
        |bytes| bytes.len() <= KEEP_FILES_UP_TO,
    )
}

/// The regular file at `path` up to `limit` bytes at least: all of it when
/// it is no bigger or the build holds it whole already (a caller wanting
/// only the head slices). A file read whole is kept, as by
/// [`read_regular`]; a bigger one is read only up to `limit`, and not kept.
pub fn read_head(path: &Path, limit: usize) -> io::Result<Arc<[u8]>> {
    let kept = VIEW.with(|v| {
        let v = v.borrow();
        v.1.as_ref()
            .and_then(|view| view.files.get(path.as_os_str()).cloned())
    });
    if let Some(k) = kept {
        return give(k);
    }
    let (bytes, whole) = read_noting(path, limit as u64)?;
    if whole && bytes.len() <= KEEP_FILES_UP_TO {
        VIEW.with(|v| {
            if let Some(view) = v.borrow_mut().1.as_mut() {
                view.files
                    .insert(path.as_os_str().to_owned(), Ok(bytes.clone()));
            }
        });
    }
    Ok(bytes)
}

/// Read `path` up to `limit` bytes and note what was opened as its
/// metadata (what `metadata` would say; a reload stamp asks); also
/// whether the file was read whole.
fn read_noting(path: &Path, limit: u64) -> io::Result<(Arc<[u8]>, bool)> {
    // Listed as a plain file: no need to look at it before opening.
    let known_regular = in_scope() && listed_as_file(path);
    let (bytes, meta) = crate::plugins::atomic::read_regular_head(path, known_regular, limit)?;
    // Stopped before the limit (at the end), or the file is no bigger.
    let whole = (bytes.len() as u64) < limit || meta.len() <= limit;
    VIEW.with(|v| {
        if let Some(view) = v.borrow_mut().1.as_mut() {
            view.metadata.insert(path.as_os_str().to_owned(), Ok(meta));
        }
    });
    Ok((Arc::from(bytes), whole))
}

/// The entries of directory `dir`, sorted by name.
pub fn entries(dir: &Path) -> io::Result<Arc<[Entry]>> {
    through(
        dir,
        |v| &mut v.listings,
        |d| {
            // An entry that cannot be read (removed while listing) is
            // left out, as the listings this replaced did; the rest stand.
            let mut out: Vec<Entry> = std::fs::read_dir(d)?
                .filter_map(Result::ok)
                .filter_map(|e| {
                    Some(Entry {
                        file_type: e.file_type().ok()?,
                        name: e.file_name(),
                    })
                })
                .collect();
            out.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(Arc::from(out))
        },
        |_| true,
    )
}

/// `std::fs::metadata` (symbolic links followed).
pub fn metadata(path: &Path) -> io::Result<std::fs::Metadata> {
    through(
        path,
        |v| &mut v.metadata,
        |p| std::fs::metadata(p),
        |_| true,
    )
}

/// `make(text)`, made once per build for the same `text` (a manifest's
/// text is parsed by discovery, the sniff and the load); `what` names the
/// kind of value. Outside a scope it is made every time.
pub fn derived<T: Clone + Send + Sync + 'static>(
    what: &'static str,
    text: &str,
    make: impl FnOnce() -> T,
) -> T {
    let key = (what, text.to_owned());
    let kept = VIEW.with(|v| {
        let v = v.borrow();
        let view = v.1.as_ref()?;
        Some(
            view.derived
                .get(&key)
                .and_then(|d| d.downcast_ref::<T>().cloned()),
        )
    });
    match kept {
        None => make(),
        Some(Some(value)) => value,
        Some(None) => {
            let value = make();
            VIEW.with(|v| {
                if let Some(view) = v.borrow_mut().1.as_mut() {
                    view.derived.insert(key, Arc::new(value.clone()));
                }
            });
            value
        }
    }
}

/// What `path` is, from its parent's listing where that says enough (a
/// name that is not there is nothing; a plain file or directory is what
/// its entry says), else from its metadata (a symbolic link followed).
fn kind_of(path: &Path) -> Option<FileKind> {
    let Some((parent, name)) = split(path) else {
        return metadata(path).ok().map(|m| FileKind::of(m.file_type()));
    };
    // A parent its own (already listed) parent does not have: nothing
    // under it, without trying to list it.
    if let Some((grand, parent_name)) = split(parent) {
        if let Some(Ok(listing)) = listed(grand) {
            find(&listing, parent_name)?;
        }
    }
    let Ok(listing) = entries(parent) else {
        // A directory that can be entered but not listed: ask the path.
        return metadata(path).ok().map(|m| FileKind::of(m.file_type()));
    };
    let entry = find(&listing, name)?;
    if entry.file_type.is_symlink() {
        return metadata(path).ok().map(|m| FileKind::of(m.file_type()));
    }
    Some(FileKind::of(entry.file_type))
}

/// `path`'s directory and last name, by its bytes (`Path::parent` and
/// `file_name` parse every component: most of a lookup's cost). `None`
/// for a root, or a last name of `.` or `..`.
fn split(path: &Path) -> Option<(&Path, &OsStr)> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let end = bytes.iter().rposition(|&b| b != b'/')? + 1;
    let bytes = &bytes[..end];
    let (parent, name) = match bytes.iter().rposition(|&b| b == b'/') {
        Some(0) => (&b"/"[..], &bytes[1..]),
        Some(at) => (&bytes[..at], &bytes[at + 1..]),
        None => (&b"."[..], bytes),
    };
    if name == b"." || name == b".." {
        return None;
    }
    Some((
        Path::new(OsStr::from_bytes(parent)),
        OsStr::from_bytes(name),
    ))
}

#[derive(PartialEq)]
enum FileKind {
    File,
    Dir,
    Other,
}

impl FileKind {
    fn of(t: FileType) -> FileKind {
        if t.is_file() {
            FileKind::File
        } else if t.is_dir() {
            FileKind::Dir
        } else {
            FileKind::Other
        }
    }
}

/// Whether `path`'s parent listing has it as a plain file (not a link).
fn listed_as_file(path: &Path) -> bool {
    let Some((parent, name)) = split(path) else {
        return false;
    };
    listed(parent)
        .and_then(Result::ok)
        .is_some_and(|l| find(&l, name).is_some_and(|e| e.file_type.is_file()))
}

/// `Path::is_file`, answered from the view inside a scope.
pub fn is_file(path: &Path) -> bool {
    if !in_scope() {
        return path.is_file();
    }
    kind_of(path) == Some(FileKind::File)
}

/// `Path::is_dir`, answered from the view inside a scope.
pub fn is_dir(path: &Path) -> bool {
    if !in_scope() {
        return path.is_dir();
    }
    kind_of(path) == Some(FileKind::Dir)
}

/// The entry `name` of a listing (sorted by name).
fn find<'a>(listing: &'a [Entry], name: &OsStr) -> Option<&'a Entry> {
    listing
        .binary_search_by(|e| e.name.as_os_str().cmp(name))
        .ok()
        .map(|i| &listing[i])
}

/// The listing of `dir` the view already has, if any.
fn listed(dir: &Path) -> Option<Kept<Arc<[Entry]>>> {
    VIEW.with(|v| {
        v.borrow()
            .1
            .as_ref()?
            .listings
            .get(dir.as_os_str())
            .cloned()
    })
}

fn in_scope() -> bool {
    VIEW.with(|v| v.borrow().1.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_keeps_the_first_look_and_none_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plugin.yaml");
        std::fs::write(&file, "name: a\n").unwrap();
        {
            let _scope = Scope::enter();
            assert_eq!(&*read_regular(&file).unwrap(), b"name: a\n");
            assert!(is_file(&file));
            assert!(!is_file(&dir.path().join("plugin.yml")));
            std::fs::write(&file, "name: b\n").unwrap();
            std::fs::write(dir.path().join("plugin.yml"), "x").unwrap();
            {
                let _inner = Scope::enter();
                assert_eq!(&*read_regular(&file).unwrap(), b"name: a\n");
            }
            assert_eq!(&*read_regular(&file).unwrap(), b"name: a\n");
            assert!(!is_file(&dir.path().join("plugin.yml")));
        }
        assert_eq!(&*read_regular(&file).unwrap(), b"name: b\n");
        assert!(is_file(&dir.path().join("plugin.yml")));
    }

    #[test]
    fn a_derived_value_is_made_once_per_text_in_a_scope() {
        let made = std::cell::Cell::new(0);
        let make = |t: &str| {
            derived("len", t, || {
                made.set(made.get() + 1);
                t.len()
            })
        };
        {
            let _scope = Scope::enter();
            assert_eq!((make("ab"), make("ab"), make("abc")), (2, 2, 3));
            assert_eq!(made.get(), 2);
        }
        make("ab");
        assert_eq!(made.get(), 3);
    }

    #[test]
    fn errors_are_kept_with_their_kind() {
        let dir = tempfile::tempdir().unwrap();
        let _scope = Scope::enter();
        let missing = dir.path().join("nothing");
        assert_eq!(
            read_regular(&missing).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        std::fs::write(&missing, "now").unwrap();
        assert_eq!(
            read_regular(&missing).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            read_regular(dir.path()).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(is_dir(dir.path()));
    }

    #[test]
    fn a_path_splits_as_path_parent_and_file_name_do() {
        for path in ["a/b", "/a", "a", "a/b/", "/a/b/c.py", "./a", "a//b"] {
            let p = Path::new(path);
            let (parent, name) = split(p).unwrap();
            assert_eq!(Some(name), p.file_name(), "{path}");
            let expected = p.parent().filter(|q| !q.as_os_str().is_empty());
            assert_eq!(
                parent.components().collect::<Vec<_>>(),
                expected
                    .unwrap_or(Path::new("."))
                    .components()
                    .collect::<Vec<_>>(),
                "{path}"
            );
        }
        assert!(split(Path::new("/")).is_none());
        assert!(split(Path::new("a/..")).is_none());
    }

    #[test]
    fn what_a_helper_thread_saw_is_the_builds_view_once_adopted() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plugin.yaml");
        std::fs::write(&file, "name: a\n").unwrap();
        let (text, looked) = std::thread::scope(|s| {
            s.spawn(|| looking(|| read_regular(&file).unwrap()))
                .join()
                .unwrap()
        });
        assert_eq!(&*text, b"name: a\n");
        std::fs::write(&file, "name: b\n").unwrap();
        let _scope = Scope::enter();
        // What this thread saw itself stays; the helper's fills the rest.
        let other = dir.path().join("other.yaml");
        std::fs::write(&other, "mine").unwrap();
        assert_eq!(&*read_regular(&other).unwrap(), b"mine");
        adopt(looked);
        assert_eq!(&*read_regular(&file).unwrap(), b"name: a\n");
        assert_eq!(&*read_regular(&other).unwrap(), b"mine");
    }

    #[test]
    fn looking_inside_an_open_scope_keeps_its_view_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a");
        std::fs::write(&file, "1").unwrap();
        let _scope = Scope::enter();
        let (_, looked) = looking(|| read_regular(&file).unwrap());
        assert!(looked.0.is_none());
        std::fs::write(&file, "2").unwrap();
        assert_eq!(&*read_regular(&file).unwrap(), b"1");
        // Outside any scope, adopting keeps nothing.
        let outside = std::thread::spawn(move || {
            let (_, looked) = looking(|| read_regular(&file).unwrap());
            adopt(looked);
            !in_scope()
        });
        assert!(outside.join().unwrap());
    }

    #[test]
    fn a_head_read_keeps_a_whole_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let (small, big) = (dir.path().join("small.py"), dir.path().join("big.py"));
        std::fs::write(&small, "abc").unwrap();
        std::fs::write(&big, "0123456789").unwrap();
        let _scope = Scope::enter();
        assert_eq!(&*read_head(&small, 4).unwrap(), b"abc");
        assert_eq!(&*read_head(&big, 4).unwrap(), b"0123");
        std::fs::write(&small, "changed").unwrap();
        // The small file was kept whole; the big one's head was not kept.
        assert_eq!(&*read_regular(&small).unwrap(), b"abc");
        assert_eq!(&*read_regular(&big).unwrap(), b"0123456789");
        assert_eq!(&*read_head(&big, 4).unwrap(), b"0123456789");
    }

    #[test]
    fn a_symbolic_link_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        let _scope = Scope::enter();
        assert!(is_dir(&dir.path().join("link")));
        assert!(!is_file(&dir.path().join("link")));
    }
}
