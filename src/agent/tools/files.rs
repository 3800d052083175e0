//! The file tools: `read_file`, `write_file`, `edit_file`, `list_dir`.
//! Every path goes through the [`Workspace`]'s directory handle; the
//! handlers only shape arguments and results.

use std::io::Read;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::text_arg;
use super::workspace::{FileError, Op, Workspace};
use crate::core::hooks::ToolCallContext;
use crate::core::registry::{Tool, ToolHandler, ToolReturn, ToolSpec};

struct FileTool<F>(Workspace, F);

impl<F> ToolHandler for FileTool<F>
where
    F: Fn(&Workspace, &Map<String, Value>) -> Result<String, String> + Send + Sync + 'static,
{
    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        ToolReturn::Ready((self.1)(&self.0, &ctx.params).map_err(Into::into))
    }
}

pub(super) fn file_tool<F>(workspace: &Workspace, spec: ToolSpec, f: F) -> Tool
where
    F: Fn(&Workspace, &Map<String, Value>) -> Result<String, String> + Send + Sync + 'static,
{
    Tool::new(spec, Arc::new(FileTool(workspace.clone(), f)))
}

/// The first `cap` bytes of a file, reading no more than `cap + 1` of them
/// (the extra byte tells whether it was cut), however large the file is.
pub(super) fn read_file(
    ws: &Workspace,
    args: &Map<String, Value>,
    cap: usize,
) -> Result<String, String> {
    let target = ws.target(text_arg(args, "path")?)?;
    let (file, meta) = ws.open_regular(&target)?;
    let mut bytes = Vec::with_capacity((meta.len() as usize).min(cap.saturating_add(1)));
    file.take(cap as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| FileError::Io {
            op: Op::Read,
            shown: target.shown(),
            error,
        })?;
    let cut = bytes.len() > cap;
    bytes.truncate(cap);
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if cut {
        // The size when opened; a file growing meanwhile has at least what was read.
        let total = meta.len().max(cap as u64 + 1);
        text.push_str(&format!("\n[… truncated: showed {cap} of {total} bytes]"));
    }
    Ok(text)
}

pub(super) fn write_file(ws: &Workspace, args: &Map<String, Value>) -> Result<String, String> {
    let target = ws.target(text_arg(args, "path")?)?;
    let content = text_arg(args, "content")?;
    let path = ws.replace_file(&target, content.as_bytes())?;
    Ok(format!(
        "Wrote {} bytes to {}",
        content.len(),
        path.display()
    ))
}

pub(super) fn edit_file(ws: &Workspace, args: &Map<String, Value>) -> Result<String, String> {
    let target = ws.target(text_arg(args, "path")?)?;
    let old = text_arg(args, "old_string")?;
    let new = text_arg(args, "new_string")?;
    if old.is_empty() {
        return Err("old_string must not be empty".into());
    }
    let (mut file, _) = ws.open_regular(&target)?;
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|error| FileError::Io {
            op: Op::Read,
            shown: target.shown(),
            error,
        })?;
    let count = text.matches(old).count();
    let all = args
        .get("replace_all")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match count {
        0 => Err(format!("old_string was not found in {}", target.shown())),
        n if n > 1 && !all => Err(format!(
            "old_string occurs {n} times in {}; make it unique or pass replace_all",
            target.shown()
        )),
        n => {
            let updated = if all {
                text.replace(old, new)
            } else {
                text.replacen(old, new, 1)
            };
            let path = ws.replace_file(&target, updated.as_bytes())?;
            Ok(format!("Replaced {n} occurrence(s) in {}", path.display()))
        }
    }
}

pub(super) fn list_dir(ws: &Workspace, args: &Map<String, Value>) -> Result<String, String> {
    let target = ws.target(args.get("path").and_then(Value::as_str).unwrap_or("."))?;
    let dir = ws.open_dir(&target, Op::List)?;
    let entries = dir.entries().map_err(|error| FileError::Io {
        op: Op::List,
        shown: target.shown(),
        error,
    })?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                format!("{name}/")
            } else {
                name
            }
        })
        .collect();
    names.sort();
    Ok(if names.is_empty() {
        "(empty)".into()
    } else {
        names.join("\n")
    })
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use serde_json::json;

    use super::*;

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().expect("an object").clone()
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn write_file_replaces_the_file_whole_instead_of_rewriting_it_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let target = ws.root().join("notes.md");
        std::fs::write(&target, "old content").unwrap();
        // Someone reading the file while the tool writes it.
        let mut reader = std::fs::File::open(&target).unwrap();

        let reply = write_file(
            &ws,
            &args(json!({"path": "notes.md", "content": "new content, longer"})),
        )
        .unwrap();
        assert_eq!(
            reply,
            format!("Wrote 19 bytes to {}", target.display()),
            "the result string is unchanged"
        );

        let mut seen = String::new();
        reader.read_to_string(&mut seen).unwrap();
        assert_eq!(
            seen, "old content",
            "an open reader keeps the complete old file: it was never truncated in place"
        );
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "new content, longer"
        );
        assert_eq!(
            names_in(ws.root()),
            [".plughost-workspace", "notes.md"],
            "no temporary file is left behind"
        );
    }

    #[test]
    fn edit_file_replaces_the_file_whole_and_keeps_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let script = ws.root().join("bin/run.sh");
        std::fs::create_dir_all(script.parent().unwrap()).unwrap();
        std::fs::write(&script, "#!/bin/sh\necho one\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o751)).unwrap();
        let mut reader = std::fs::File::open(&script).unwrap();

        let reply = edit_file(
            &ws,
            &args(json!({"path": "bin/run.sh", "old_string": "one", "new_string": "two"})),
        )
        .unwrap();
        assert_eq!(
            reply,
            format!("Replaced 1 occurrence(s) in {}", script.display())
        );

        let mut seen = String::new();
        reader.read_to_string(&mut seen).unwrap();
        assert_eq!(
            seen, "#!/bin/sh\necho one\n",
            "the old file was not rewritten"
        );
        assert_eq!(
            std::fs::read_to_string(&script).unwrap(),
            "#!/bin/sh\necho two\n"
        );
        let mode = std::fs::metadata(&script).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o751, "an executable script stays executable");
        assert_eq!(names_in(&ws.root().join("bin")), ["run.sh"]);
    }

    #[test]
    fn a_new_file_gets_the_mode_an_in_place_write_would_give() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        write_file(&ws, &args(json!({"path": "new.txt", "content": "x"}))).unwrap();
        // The reference honours this process's umask, whatever it is.
        let reference = ws.root().join("reference.txt");
        std::fs::write(&reference, "x").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&ws.root().join("new.txt")), mode(&reference));
    }

    #[test]
    fn a_file_that_cannot_be_written_is_refused_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let locked = ws.root().join("locked.txt");
        std::fs::write(&locked, "keep").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o444)).unwrap();
        if std::fs::OpenOptions::new()
            .write(true)
            .open(&locked)
            .is_ok()
        {
            // Running as root: permissions do not bind, nothing to check.
            return;
        }
        let refused = write_file(
            &ws,
            &args(json!({"path": "locked.txt", "content": "overwritten"})),
        )
        .unwrap_err();
        assert!(
            refused.starts_with("cannot write locked.txt: "),
            "{refused}"
        );
        assert_eq!(std::fs::read_to_string(&locked).unwrap(), "keep");
        let refused = write_file(&ws, &args(json!({"path": ".", "content": "x"}))).unwrap_err();
        assert!(refused.starts_with("cannot write "), "{refused}");
        assert_eq!(names_in(ws.root()), [".plughost-workspace", "locked.txt"]);
    }
}
