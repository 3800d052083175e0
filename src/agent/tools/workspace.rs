//! The workspace the file tools are confined to, by construction: every file
//! is reached relative to a directory handle opened once
//! ([`cap_std::fs::Dir`], which resolves paths with `openat2`'s
//! `RESOLVE_BENEATH` where the kernel has it and component by component
//! otherwise). `..` past the root, absolute paths and symbolic links leading
//! out cannot be followed, whatever changes on disk between a check and a
//! write — nothing here compares path strings to decide what is allowed.
//!
//! On top of that: a write never goes through a dangling link (it would
//! create a file wherever the link points), and FIFOs, sockets and devices
//! are refused without being opened in a way that could block.

use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cap_std::fs::{Dir, File, FileTypeExt, Metadata, OpenOptions, OpenOptionsExt};

/// The directory the file tools are confined to.
#[derive(Clone, Debug)]
pub struct Workspace {
    /// Its canonical path, for results and for `exec`'s working directory.
    root: PathBuf,
    /// The path it was given as (before symlinks were resolved), so an
    /// absolute path the model copies from the user's prompt is recognised.
    given: PathBuf,
    dir: Arc<Dir>,
}

/// Why a file tool could not do what it was asked; rendered once, at the
/// tool's boundary, so control flow never depends on message text.
#[derive(Debug)]
pub(crate) enum FileError {
    /// The path leaves the workspace (`..`, an absolute path elsewhere, a
    /// symbolic link pointing out).
    Outside { raw: String, root: PathBuf },
    /// A write to a symbolic link whose target does not exist.
    DanglingLink { raw: String },
    /// A FIFO, socket or device where a regular file was expected.
    Special { raw: String, kind: &'static str },
    /// The operating system's refusal, e.g. `cannot write notes.md: Permission denied`.
    Io {
        op: Op,
        shown: String,
        error: io::Error,
    },
}

/// What was being done when an [`io::Error`] happened (the result's verb).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    Read,
    Write,
    Create,
    List,
    RunIn,
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileError::Outside { raw, root } => {
                write!(f, "{raw} is outside the workspace ({})", root.display())
            }
            FileError::DanglingLink { raw } => write!(
                f,
                "{raw} is a symbolic link to a file that does not exist; the file tools do not \
                 create files through links: write to a path inside the workspace instead, or \
                 remove the link first"
            ),
            FileError::Special { raw, kind } => write!(
                f,
                "{raw} is a {kind}, not a regular file; the file tools only read and write \
                 regular files (use exec for anything else)"
            ),
            FileError::Io { op, shown, error } => {
                let verb = match op {
                    Op::Read => "cannot read",
                    Op::Write => "cannot write",
                    Op::Create => "cannot create",
                    Op::List => "cannot list",
                    Op::RunIn => "cannot run a command in",
                };
                write!(f, "{verb} {shown}: {error}")
            }
        }
    }
}

impl From<FileError> for String {
    fn from(e: FileError) -> String {
        e.to_string()
    }
}

/// A path argument turned into a path relative to the workspace's handle.
pub(crate) struct Target {
    /// As the model wrote it (trimmed), for refusals.
    pub raw: String,
    /// Relative to the workspace; `.` for the root.
    pub rel: PathBuf,
}

impl Target {
    /// For `cannot <verb> <shown>` messages: the path inside the workspace.
    pub fn shown(&self) -> String {
        shown(&self.rel)
    }
}

fn shown(rel: &Path) -> String {
    let mut normal = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    if normal.as_os_str().is_empty() {
        ".".into()
    } else {
        normal.display().to_string()
    }
}

/// cap-std reports a path that would leave the directory as a
/// `PermissionDenied` error of its own, with no OS error code; a real
/// `EACCES` always carries one.
fn is_escape(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none()
}

/// The name of a file type the tools refuse, or `None` for a regular file,
/// directory or symbolic link.
fn special_kind(meta: &Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_fifo() {
        Some("FIFO (named pipe)")
    } else if t.is_socket() {
        Some("socket")
    } else if t.is_char_device() {
        Some("character device")
    } else if t.is_block_device() {
        Some("block device")
    } else if t.is_file() || t.is_dir() || t.is_symlink() {
        None
    } else {
        Some("special file")
    }
}

/// Flags for every open of an existing file: never block (a FIFO with no
/// writer would otherwise hang the tool; nothing else is affected).
fn nonblocking(options: &mut OpenOptions) -> &mut OpenOptions {
    options.custom_flags(libc::O_NONBLOCK)
}

/// Temporary-file names unique within the process (the pid and a counter)
/// and across processes sharing the workspace (the pid).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temporary file of an atomic write, removed unless it was renamed into place.
struct TempFile<'a> {
    dir: &'a Dir,
    name: Option<String>,
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            let _ = self.dir.remove_file(name);
        }
    }
}

impl Workspace {
    /// Use (and create) `root`.
    pub fn new(root: &Path) -> io::Result<Workspace> {
        std::fs::create_dir_all(root)?;
        let canonical = root.canonicalize()?;
        let dir = Dir::open_ambient_dir(&canonical, cap_std::ambient_authority())?;
        // A marker keeps the directory from ever being "empty" to clean-up
        // tools. Whatever has the name already (even a link) is left alone.
        let marker = ".plughost-workspace";
        if dir.symlink_metadata(marker).is_err() {
            dir.write(
                marker,
                "The plughost agent's workspace: its file tools are confined here.\n",
            )?;
        }
        let given = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        Ok(Workspace {
            root: canonical,
            given,
            dir: Arc::new(dir),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The absolute path of `rel`, for results (`Wrote 5 bytes to /…`).
    pub(crate) fn absolute(&self, rel: &Path) -> PathBuf {
        let shown = shown(rel);
        if shown == "." {
            self.root.clone()
        } else {
            self.root.join(shown)
        }
    }

    fn outside(&self, raw: &str) -> FileError {
        FileError::Outside {
            raw: raw.into(),
            root: self.root.clone(),
        }
    }

    /// Map an error of an operation on `target` to the tool's refusal.
    fn io_error(&self, target: &Target, op: Op, error: io::Error) -> FileError {
        if is_escape(&error) {
            self.outside(&target.raw)
        } else {
            FileError::Io {
                op,
                shown: target.shown(),
                error,
            }
        }
    }

    /// Turn a tool's path argument into a path relative to the workspace.
    /// An absolute path is accepted only under the workspace's own path;
    /// whether a relative one stays inside is decided by the directory
    /// handle when it is used, not here.
    pub(crate) fn target(&self, raw: &str) -> Result<Target, FileError> {
        let raw = raw.trim();
        let given = Path::new(raw);
        let rel = if given.is_absolute() {
            given
                .strip_prefix(&self.root)
                .or_else(|_| given.strip_prefix(&self.given))
                .map_err(|_| self.outside(raw))?
                .to_path_buf()
        } else {
            given.to_path_buf()
        };
        let rel = if rel.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            rel
        };
        Ok(Target {
            raw: raw.into(),
            rel,
        })
    }

    /// Open a regular file for reading, following links only inside the
    /// workspace, never blocking on a FIFO.
    pub(crate) fn open_regular(&self, target: &Target) -> Result<(File, Metadata), FileError> {
        let meta = self
            .dir
            .metadata(&target.rel)
            .map_err(|e| self.io_error(target, Op::Read, e))?;
        self.check_readable(target, &meta)?;
        let file = self
            .dir
            .open_with(&target.rel, nonblocking(OpenOptions::new().read(true)))
            .map_err(|e| self.io_error(target, Op::Read, e))?;
        // The same checks on what was actually opened: the path may have
        // been replaced by something else since.
        let meta = file
            .metadata()
            .map_err(|e| self.io_error(target, Op::Read, e))?;
        self.check_readable(target, &meta)?;
        Ok((file, meta))
    }

    fn check_readable(&self, target: &Target, meta: &Metadata) -> Result<(), FileError> {
        if let Some(kind) = special_kind(meta) {
            return Err(FileError::Special {
                raw: target.raw.clone(),
                kind,
            });
        }
        if meta.is_dir() {
            return Err(FileError::Io {
                op: Op::Read,
                shown: target.shown(),
                error: io::Error::from_raw_os_error(libc::EISDIR),
            });
        }
        Ok(())
    }

    /// Open a directory of the workspace (`.` for the root).
    pub(crate) fn open_dir(&self, target: &Target, op: Op) -> Result<Dir, FileError> {
        self.dir
            .open_dir(&target.rel)
            .map_err(|e| self.io_error(target, op, e))
    }

    /// The canonical path of a directory of the workspace, for `exec`'s
    /// working directory (a path, since a child process starts from one).
    pub(crate) fn directory_path(&self, target: &Target) -> Result<PathBuf, FileError> {
        let real = self
            .dir
            .canonicalize(&target.rel)
            .map_err(|e| self.io_error(target, Op::RunIn, e))?;
        let meta = self
            .dir
            .metadata(&real)
            .map_err(|e| self.io_error(target, Op::RunIn, e))?;
        if !meta.is_dir() {
            return Err(FileError::Io {
                op: Op::RunIn,
                shown: target.shown(),
                error: io::Error::from_raw_os_error(libc::ENOTDIR),
            });
        }
        Ok(self.absolute(&real))
    }

    /// Give the file at `target` the content `bytes` all at once, creating
    /// its parent directories, and return the path written (a link inside
    /// the workspace is written through to its target).
    ///
    /// Writing in place would leave a truncated file behind when the process
    /// dies, the disk fills up or the tool is cancelled mid-write, and a
    /// concurrent reader (a test runner, an editor) could see half of it. The
    /// bytes go to a temporary file beside the target, which is renamed over
    /// it only once complete: readers see the old content or the new, and a
    /// failure leaves the old file untouched (the temporary file is removed).
    /// Both live in one directory handle opened once, so a directory swapped
    /// for a link meanwhile changes nothing: the handle is the directory.
    pub(crate) fn replace_file(&self, target: &Target, bytes: &[u8]) -> Result<PathBuf, FileError> {
        let mut rel = target.rel.clone();
        // One pass, plus one after resolving a link inside the workspace; a
        // link found again means the path is changing under us.
        for _ in 0..2 {
            match self.replace_at(target, &rel, bytes)? {
                Written::Done(real) => return Ok(self.absolute(&real)),
                Written::Link => {
                    rel = match self.dir.canonicalize(&rel) {
                        Ok(real) => real,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {
                            return Err(FileError::DanglingLink {
                                raw: target.raw.clone(),
                            })
                        }
                        Err(e) => return Err(self.io_error(target, Op::Write, e)),
                    };
                }
            }
        }
        Err(self.io_error(target, Op::Write, io::Error::from_raw_os_error(libc::ELOOP)))
    }

    /// Create `target`'s directories like `mkdir -p`, following links only
    /// inside the workspace and never creating a directory through one: a
    /// dangling link is refused the way a write through it is.
    fn create_dirs(&self, target: &Target) -> Result<(), FileError> {
        let mut prefix = PathBuf::new();
        for part in target.rel.components() {
            prefix.push(part);
            let step = Target {
                raw: target.raw.clone(),
                rel: prefix.clone(),
            };
            let error = match self.dir.metadata(&prefix) {
                Ok(meta) if meta.is_dir() => continue,
                // What `mkdir -p` says about a file in the way.
                Ok(_) => io::Error::from_raw_os_error(libc::EEXIST),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if self
                        .dir
                        .symlink_metadata(&prefix)
                        .is_ok_and(|m| m.is_symlink())
                    {
                        // Looked at again: a link just put in place may lead out.
                        return Err(match self.dir.metadata(&prefix) {
                            Err(e) if is_escape(&e) => self.outside(&target.raw),
                            _ => FileError::DanglingLink {
                                raw: target.raw.clone(),
                            },
                        });
                    }
                    match self.dir.create_dir(&prefix) {
                        Ok(()) => continue,
                        // Created meanwhile by someone else: fine if a directory.
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                            match self.dir.metadata(&prefix) {
                                Ok(meta) if meta.is_dir() => continue,
                                Ok(_) => e,
                                Err(e) => e,
                            }
                        }
                        Err(e) => e,
                    }
                }
                Err(e) => e,
            };
            return Err(self.io_error(&step, Op::Create, error));
        }
        Ok(())
    }

    fn replace_at(&self, target: &Target, rel: &Path, bytes: &[u8]) -> Result<Written, FileError> {
        let Some(name) = rel.file_name() else {
            // `.`, `..` or `sub/..`: a directory, or outside.
            let error = match self.dir.metadata(rel) {
                Err(e) => e,
                Ok(_) => io::Error::from_raw_os_error(libc::EISDIR),
            };
            return Err(self.io_error(target, Op::Write, error));
        };
        let parent = match rel.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let parent_target = Target {
            raw: target.raw.clone(),
            rel: parent.to_path_buf(),
        };
        self.create_dirs(&parent_target)?;
        let dir = self.open_dir(&parent_target, Op::Create)?;
        // Relative paths are shown relative to the workspace, the parent's real path included.
        let real_parent = self
            .dir
            .canonicalize(parent)
            .unwrap_or(parent.to_path_buf());

        let existing = match dir.symlink_metadata(name) {
            Ok(meta) if meta.is_symlink() => return Ok(Written::Link),
            Ok(meta) => {
                if let Some(kind) = special_kind(&meta) {
                    return Err(FileError::Special {
                        raw: target.raw.clone(),
                        kind,
                    });
                }
                // The rename would replace a file we may not write to (or a
                // directory's error would only come from the rename): fail
                // the way an in-place write fails, before touching anything.
                // Without following a link, without blocking on a FIFO.
                let file = dir
                    .open_with(
                        name,
                        OpenOptions::new()
                            .write(true)
                            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW),
                    )
                    .map_err(|e| self.io_error(target, Op::Write, e))?;
                let meta = file
                    .metadata()
                    .map_err(|e| self.io_error(target, Op::Write, e))?;
                if let Some(kind) = special_kind(&meta) {
                    return Err(FileError::Special {
                        raw: target.raw.clone(),
                        kind,
                    });
                }
                Some(meta)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(self.io_error(target, Op::Write, e)),
        };

        let write_error = |e| self.io_error(target, Op::Write, e);
        let (mut file, mut temp) = create_temp(&dir).map_err(write_error)?;
        if let Some(meta) = existing {
            // An edited file keeps its mode (an executable script stays one).
            file.set_permissions(meta.permissions())
                .map_err(write_error)?;
        }
        file.write_all(bytes).map_err(write_error)?;
        // On disk before the rename, so a crash cannot leave the new name
        // pointing at unwritten blocks.
        file.sync_all().map_err(write_error)?;
        drop(file);
        let temp_name = temp.name.clone().expect("not yet renamed");
        dir.rename(&temp_name, &dir, name).map_err(write_error)?;
        temp.name = None;
        Ok(Written::Done(real_parent.join(name)))
    }
}

enum Written {
    Done(PathBuf),
    /// The name is a symbolic link: resolve it and write its target.
    Link,
}

/// A new, empty temporary file in `dir` with the mode an in-place write
/// would create (0o666 less the umask), not a temporary file's usual 0o600.
fn create_temp(dir: &Dir) -> io::Result<(File, TempFile<'_>)> {
    let pid = std::process::id();
    let mut collisions = 0;
    loop {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!(".plughost-write-{pid}-{n}.tmp");
        match dir.open_with(
            &name,
            OpenOptions::new().write(true).create_new(true).mode(0o666),
        ) {
            Ok(file) => {
                return Ok((
                    file,
                    TempFile {
                        dir,
                        name: Some(name),
                    },
                ))
            }
            // Left by a process with the same pid that died mid-write.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && collisions < 100 => {
                collisions += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
