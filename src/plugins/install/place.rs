//! Getting a plugin into place: refuse special files, copy regular ones, swap the copy in.

use std::path::{Path, PathBuf};

use super::{io_err, InstallError};

/// What a special file is called in messages; `None` for a regular file,
/// a directory or a link.
fn special_kind(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if file_type.is_socket() {
        Some("a socket")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else {
        None
    }
}

/// Refuse special files, or links to them, anywhere in the plugin tree that
/// is copied. Only metadata is read: nothing is opened.
pub(super) fn refuse_special_files(dir: &Path) -> Result<(), InstallError> {
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name();
        if name == ".git" || name == "__pycache__" {
            continue;
        }
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(io_err(&path))?;
        let file_type = if meta.file_type().is_symlink() {
            // What the link points to; a broken link is reported by the copy.
            match std::fs::metadata(&path) {
                Ok(target) => target.file_type(),
                Err(_) => continue,
            }
        } else {
            meta.file_type()
        };
        if let Some(kind) = special_kind(file_type) {
            return Err(InstallError::SpecialFile { path, kind });
        }
        // A linked directory is checked where it really is (inside the
        // plugin, or the copy refuses it).
        if meta.is_dir() {
            refuse_special_files(&path)?;
        }
    }
    Ok(())
}

/// Copy one regular file. Opened without blocking and without following a
/// link, and checked once open: a FIFO swapped in after the check is
/// refused, not waited on.
fn copy_regular(src: &Path, dst: &Path) -> Result<(), InstallError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut from = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(src)
        .map_err(io_err(src))?;
    let meta = from.metadata().map_err(io_err(src))?;
    if let Some(kind) = special_kind(meta.file_type()) {
        return Err(InstallError::SpecialFile {
            path: src.to_path_buf(),
            kind,
        });
    }
    let mut to = std::fs::File::create(dst).map_err(io_err(dst))?;
    std::io::copy(&mut from, &mut to).map_err(io_err(src))?;
    to.set_permissions(meta.permissions())
        .map_err(io_err(dst))?;
    Ok(())
}

/// Put `staged` at `target`; with `previous`, the plugin already at `target`
/// is first moved there. Should the new copy fail to land, the old one is
/// moved back, so a failed `--force` leaves the installed plugin as it was
/// instead of leaving no plugin at all. `rename` is `std::fs::rename` except
/// in tests, which inject failures no file system produces on demand.
pub(super) fn swap_into_place(
    staged: &Path,
    target: &Path,
    previous: Option<&Path>,
    rename: impl Fn(&Path, &Path) -> std::io::Result<()>,
) -> Result<(), InstallError> {
    if let Some(previous) = previous {
        rename(target, previous).map_err(io_err(target))?;
    }
    let Err(error) = rename(staged, target) else {
        return Ok(());
    };
    let Some(previous) = previous else {
        return Err(io_err(target)(error));
    };
    let message = match rename(previous, target) {
        Ok(()) => format!(
            "could not move the new version into place ({error}); the installed version was left as it was"
        ),
        Err(back) => format!(
            "could not move the new version into place ({error}), nor put the installed version back ({back}); it is kept at {}",
            previous.display()
        ),
    };
    Err(InstallError::Io {
        path: target.to_path_buf(),
        message,
    })
}

/// Copy a plugin tree: no `.git` or `__pycache__`; a symlink is copied as
/// what it points to, and refused when that lies outside the plugin or
/// would copy a directory into itself.
pub(super) fn copy_plugin(root: &Path, from: &Path, to: &Path) -> Result<(), InstallError> {
    let canonical_root = root.canonicalize().map_err(io_err(root))?;
    copy_tree(&canonical_root, from, to, &mut Vec::new())
}

/// [`copy_plugin`] below `root` (canonical); `entered` holds the real
/// directories being copied, outermost first.
fn copy_tree(
    canonical_root: &Path,
    from: &Path,
    to: &Path,
    entered: &mut Vec<PathBuf>,
) -> Result<(), InstallError> {
    let root = canonical_root;
    std::fs::create_dir_all(to).map_err(io_err(to))?;
    entered.push(from.canonicalize().map_err(io_err(from))?);
    for entry in std::fs::read_dir(from).map_err(io_err(from))? {
        let entry = entry.map_err(io_err(from))?;
        let name = entry.file_name();
        if name == ".git" || name == "__pycache__" {
            continue;
        }
        let src = entry.path();
        let dst = to.join(&name);
        let meta = std::fs::symlink_metadata(&src).map_err(io_err(&src))?;
        let real = if meta.file_type().is_symlink() {
            let target = src.canonicalize().map_err(|_| {
                InstallError::NotAPlugin(
                    root.to_path_buf(),
                    format!("broken symlink {}", src.display()),
                )
            })?;
            if !target.starts_with(canonical_root) {
                return Err(InstallError::NotAPlugin(
                    root.to_path_buf(),
                    format!("symlink {} points outside the plugin", src.display()),
                ));
            }
            // A link to a directory being copied would be copied forever.
            if entered.contains(&target) {
                return Err(InstallError::NotAPlugin(
                    root.to_path_buf(),
                    format!(
                        "symlink {} points to a directory that contains it (a loop)",
                        src.display()
                    ),
                ));
            }
            target
        } else {
            src.clone()
        };
        let real_meta = std::fs::metadata(&real).map_err(io_err(&real))?;
        if real_meta.is_dir() {
            copy_tree(canonical_root, &real, &dst, entered)?;
        } else {
            copy_regular(&real, &dst)?;
        }
    }
    entered.pop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin directory holding one file that says which version it is.
    fn plugin(at: &Path, version: &str) {
        std::fs::create_dir_all(at).unwrap();
        std::fs::write(at.join("version"), version).unwrap();
    }

    fn version(at: &Path) -> String {
        std::fs::read_to_string(at.join("version")).unwrap()
    }

    /// `std::fs::rename`, failing instead when moving `from` to `to`.
    fn rename_failing(
        fail: Vec<(PathBuf, PathBuf)>,
    ) -> impl Fn(&Path, &Path) -> std::io::Result<()> {
        move |from, to| {
            if fail.iter().any(|(f, t)| f == from && t == to) {
                return Err(std::io::Error::other("injected failure"));
            }
            std::fs::rename(from, to)
        }
    }

    #[test]
    fn a_forced_replace_swaps_the_new_copy_in() {
        let dir = tempfile::tempdir().unwrap();
        let (staged, target, previous) = (
            dir.path().join("staged"),
            dir.path().join("target"),
            dir.path().join("previous"),
        );
        plugin(&staged, "new");
        plugin(&target, "old");
        swap_into_place(&staged, &target, Some(&previous), rename_failing(vec![])).unwrap();
        assert_eq!(version(&target), "new");
        assert_eq!(version(&previous), "old");
        assert!(!staged.exists());
    }

    #[test]
    fn a_failed_forced_replace_puts_the_installed_plugin_back() {
        let dir = tempfile::tempdir().unwrap();
        let (staged, target, previous) = (
            dir.path().join("staged"),
            dir.path().join("target"),
            dir.path().join("previous"),
        );
        plugin(&staged, "new");
        plugin(&target, "old");
        let err = swap_into_place(
            &staged,
            &target,
            Some(&previous),
            rename_failing(vec![(staged.clone(), target.clone())]),
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(message.contains("injected failure"), "{message}");
        assert!(message.contains("left as it was"), "{message}");
        assert_eq!(version(&target), "old", "the installed plugin is back");
        assert!(!previous.exists());
        assert_eq!(version(&staged), "new");
    }

    #[test]
    fn an_old_plugin_that_cannot_be_put_back_is_named_not_lost() {
        let dir = tempfile::tempdir().unwrap();
        let (staged, target, previous) = (
            dir.path().join("staged"),
            dir.path().join("target"),
            dir.path().join("previous"),
        );
        plugin(&staged, "new");
        plugin(&target, "old");
        let err = swap_into_place(
            &staged,
            &target,
            Some(&previous),
            rename_failing(vec![
                (staged.clone(), target.clone()),
                (previous.clone(), target.clone()),
            ]),
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains(&format!("kept at {}", previous.display())),
            "{message}"
        );
        assert_eq!(version(&previous), "old");
    }

    #[test]
    fn a_first_install_that_fails_leaves_no_target() {
        let dir = tempfile::tempdir().unwrap();
        let (staged, target) = (dir.path().join("staged"), dir.path().join("target"));
        plugin(&staged, "new");
        swap_into_place(
            &staged,
            &target,
            None,
            rename_failing(vec![(staged.clone(), target.clone())]),
        )
        .unwrap_err();
        assert!(!target.exists());
    }
}
