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
