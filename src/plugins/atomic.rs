//! The files the plugin layer rewrites (`config.json`, `plugins.lock.json`):
//! each edit holds an exclusive lock file, and the new text is written whole
//! and renamed into place, so a reader never sees half a file and a full
//! disk leaves the old one as it was.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// Take the exclusive lock `<home>/<name>` (made when missing); held until dropped.
pub fn lock(home: &Path, name: &str) -> std::io::Result<File> {
    std::fs::create_dir_all(home)?;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(home.join(name))?;
    file.lock()?;
    Ok(file)
}

/// Replace `path` with `text`: written to a temporary sibling, synced, then
/// renamed over it. A failed write removes the temporary file.
pub fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("json.tmp.{}", std::process::id()));
    let written = File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Read the regular file at `path` whole; anything else there (a FIFO, a
/// device, a socket, a directory) is refused without being opened for a
/// blocking read, so a FIFO named `config.json` cannot hang plughost.
/// Symbolic links are followed to what they name, which is held to the
/// same rule.
pub fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    read_regular_head(path, false, u64::MAX).map(|(bytes, _)| bytes)
}

/// [`read_regular`], reading at most `limit` bytes (`u64::MAX`: whole; a
/// sniff's look at a file that may be a big vendored module), with the
/// metadata of what was read. `known_regular`: the caller has seen `path`
/// listed as a regular file (not a link), or expects one there and would
/// rather not pay a `stat` for it (a probe that usually finds nothing), so
/// the check before opening is skipped; the one on what was opened stays,
/// and the open neither waits on a FIFO nor makes a terminal the process's
/// controlling one.
pub(crate) fn read_regular_head(
    path: &Path,
    known_regular: bool,
    limit: u64,
) -> std::io::Result<(Vec<u8>, std::fs::Metadata)> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = |kind: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("it is {kind}, not a regular file; plughost reads only regular files there"),
        )
    };
    let kind = |meta: &std::fs::Metadata| {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_file() {
            None
        } else if t.is_fifo() {
            Some("a FIFO")
        } else if t.is_dir() {
            Some("a directory")
        } else if t.is_socket() {
            Some("a socket")
        } else {
            Some("a device or other special file")
        }
    };
    if !known_regular {
        if let Some(k) = kind(&std::fs::metadata(path)?) {
            return Err(not_regular(k));
        }
    }
    // O_NONBLOCK: should the file be swapped for a FIFO after the check,
    // opening it does not wait for a writer; the check is then repeated on
    // what was opened.
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    if let Some(k) = kind(&meta) {
        return Err(not_regular(k));
    }
    // Sized from the metadata just read (a file that grew meanwhile is
    // still read whole): `File::read_to_end` would ask for it again.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(limit)).unwrap_or(0) + 64);
    Read::by_ref(&mut file)
        .take(limit)
        .read_to_end(&mut bytes)?;
    Ok((bytes, meta))
}

/// A file's modification time, size and inode.
pub(crate) type FileStamp = (std::time::SystemTime, u64, u64);

/// What tells a version of `file` from another without reading it.
pub(crate) fn file_stamp(file: &std::path::Path) -> Option<FileStamp> {
    stamp_of_metadata(&crate::plugins::snapshot::metadata(file).ok()?)
}

/// [`file_stamp`] from metadata already read (of a file just opened).
pub(crate) fn stamp_of_metadata(m: &std::fs::Metadata) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    Some((m.modified().ok()?, m.len(), m.ino()))
}
