//! Built-in tools: `read_file`, `write_file`, `edit_file`, `list_dir`,
//! `exec` and `delegate`. Registered like plugin tools (owner `builtin`), so
//! a plugin may override one by name (with a warning).
//!
//! File tools are confined to a workspace directory: relative paths resolve
//! inside it, and a path that leaves it (`..`, an absolute path elsewhere, a
//! symlink pointing out) is refused. `exec` runs `sh -c` in the workspace
//! with a timeout and an output cap; what a shell command itself touches
//! cannot be confined, which is what `pre_tool_call` hooks are for.

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::hooks::{BoxFuture, ToolCallContext};
use crate::registry::{Tool, ToolHandler, ToolReturn, ToolSpec};

/// Owner name of the built-in tools.
pub const BUILTIN_OWNER: &str = "builtin";

/// Limits of the built-in tools.
#[derive(Clone, Debug)]
pub struct ToolLimits {
    /// Default `exec` timeout (a call may ask for less, or more up to `exec_timeout_max`).
    pub exec_timeout: Duration,
    pub exec_timeout_max: Duration,
    /// Bytes of command output kept (head and tail).
    pub exec_output_cap: usize,
    /// Bytes `read_file` returns at most.
    pub read_cap: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            exec_timeout: Duration::from_secs(60),
            exec_timeout_max: Duration::from_secs(600),
            exec_output_cap: 16 * 1024,
            read_cap: 256 * 1024,
        }
    }
}

/// The directory the file tools are confined to.
#[derive(Clone, Debug)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Use (and create) `root`.
    pub fn new(root: &Path) -> std::io::Result<Workspace> {
        std::fs::create_dir_all(root)?;
        // A marker keeps the directory from ever being "empty" to clean-up tools.
        let marker = root.join(".plughost-workspace");
        if !marker.exists() {
            std::fs::write(
                &marker,
                "The plughost agent's workspace: its file tools are confined here.\n",
            )?;
        }
        Ok(Workspace {
            root: root.canonicalize()?,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolve a tool's path argument inside the workspace, or say why not.
    pub fn resolve(&self, raw: &str) -> Result<PathBuf, String> {
        let raw = raw.trim();
        let given = Path::new(raw);
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.root.join(given)
        };
        // Lexical normalisation first ('..' may not climb out).
        let mut normal = PathBuf::new();
        for c in joined.components() {
            match c {
                Component::ParentDir => {
                    normal.pop();
                }
                Component::CurDir => {}
                other => normal.push(other),
            }
        }
        // Then resolve symlinks of the deepest existing ancestor.
        let mut existing = normal.clone();
        let mut rest = Vec::new();
        while !existing.exists() {
            match (
                existing.file_name().map(|n| n.to_owned()),
                existing.parent(),
            ) {
                (Some(name), Some(parent)) => {
                    rest.push(name);
                    existing = parent.to_path_buf();
                }
                _ => break,
            }
        }
        let mut real = existing
            .canonicalize()
            .map_err(|e| format!("cannot resolve {raw}: {e}"))?;
        for name in rest.into_iter().rev() {
            real.push(name);
        }
        if !real.starts_with(&self.root) {
            return Err(format!(
                "{raw} is outside the workspace ({})",
                self.root.display()
            ));
        }
        Ok(real)
    }

    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.display().to_string())
    }
}

/// Give `path` the content `bytes` all at once, for `write_file` and
/// `edit_file`. Writing in place would leave a truncated file behind when the
/// process dies, the disk fills up or the tool is cancelled mid-write, and a
/// concurrent reader (a test runner, an editor) could see half of it. The
/// bytes go to a temporary file beside the target, which is renamed over it
/// only once complete: readers see the old content or the new, and a failure
/// leaves the old file untouched (the temporary file is removed on drop).
fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    let dir = path.parent().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "no parent directory")
    })?;
    let existing = match std::fs::metadata(path) {
        Ok(meta) => {
            // The rename would replace a file we may not write to (or a
            // directory's error would only come from the rename): fail the
            // way an in-place write fails, before touching anything.
            std::fs::OpenOptions::new().write(true).open(path)?;
            Some(meta)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".plughost-write-")
        .suffix(".tmp")
        // A new file gets what an in-place write would create (0o666 less
        // the umask), not the temporary file's private 0o600.
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    if let Some(meta) = existing {
        // An edited file keeps its mode (an executable script stays one).
        tmp.as_file().set_permissions(meta.permissions())?;
    }
    tmp.as_file_mut().write_all(bytes)?;
    // On disk before the rename, so a crash cannot leave the new name
    // pointing at unwritten blocks.
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        parameters,
        plugin: BUILTIN_OWNER.into(),
    }
}

fn text_arg<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("missing string argument '{key}'"))
}

struct FileTool<F>(Workspace, F);

impl<F> ToolHandler for FileTool<F>
where
    F: Fn(&Workspace, &Map<String, Value>) -> Result<String, String> + Send + Sync + 'static,
{
    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        ToolReturn::Ready((self.1)(&self.0, &ctx.params).map_err(Into::into))
    }
}

fn file_tool<F>(workspace: &Workspace, spec: ToolSpec, f: F) -> Tool
where
    F: Fn(&Workspace, &Map<String, Value>) -> Result<String, String> + Send + Sync + 'static,
{
    Tool::new(spec, Arc::new(FileTool(workspace.clone(), f)))
}

fn write_file(ws: &Workspace, args: &Map<String, Value>) -> Result<String, String> {
    let path = ws.resolve(text_arg(args, "path")?)?;
    let content = text_arg(args, "content")?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    replace_file(&path, content.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", ws.shown(&path)))?;
    Ok(format!(
        "Wrote {} bytes to {}",
        content.len(),
        path.display()
    ))
}

fn edit_file(ws: &Workspace, args: &Map<String, Value>) -> Result<String, String> {
    let path = ws.resolve(text_arg(args, "path")?)?;
    let old = text_arg(args, "old_string")?;
    let new = text_arg(args, "new_string")?;
    if old.is_empty() {
        return Err("old_string must not be empty".into());
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", ws.shown(&path)))?;
    let count = text.matches(old).count();
    let all = args
        .get("replace_all")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match count {
        0 => Err(format!("old_string was not found in {}", ws.shown(&path))),
        n if n > 1 && !all => Err(format!(
            "old_string occurs {n} times in {}; make it unique or pass replace_all",
            ws.shown(&path)
        )),
        n => {
            let updated = if all {
                text.replace(old, new)
            } else {
                text.replacen(old, new, 1)
            };
            replace_file(&path, updated.as_bytes())
                .map_err(|e| format!("cannot write {}: {e}", ws.shown(&path)))?;
            Ok(format!("Replaced {n} occurrence(s) in {}", path.display()))
        }
    }
}

/// Everything but `delegate`, whose handler needs the agent (see [`DelegateSlot`]).
pub fn builtin_tools(workspace: &Workspace, limits: &ToolLimits) -> Vec<Tool> {
    let read_cap = limits.read_cap;
    vec![
        file_tool(
            workspace,
            spec(
                "read_file",
                "Read a text file in the workspace.",
                json!({"type": "object", "properties": {"path": {"type": "string", "description": "Path relative to the workspace"}}, "required": ["path"]}),
            ),
            move |ws, args| {
                let path = ws.resolve(text_arg(args, "path")?)?;
                let bytes = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", ws.shown(&path)))?;
                let mut text = String::from_utf8_lossy(&bytes[..bytes.len().min(read_cap)]).into_owned();
                if bytes.len() > read_cap {
                    text.push_str(&format!("\n[… truncated: showed {read_cap} of {} bytes]", bytes.len()));
                }
                Ok(text)
            },
        ),
        file_tool(
            workspace,
            spec(
                "write_file",
                "Create or overwrite a file in the workspace (parent directories are created).",
                json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}),
            ),
            write_file,
        ),
        file_tool(
            workspace,
            spec(
                "edit_file",
                "Replace an exact string in a workspace file (it must occur once unless replace_all).",
                json!({"type": "object", "properties": {
                    "path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"},
                    "replace_all": {"type": "boolean", "default": false}}, "required": ["path", "old_string", "new_string"]}),
            ),
            edit_file,
        ),
        file_tool(
            workspace,
            spec(
                "list_dir",
                "List a workspace directory (directories end with '/').",
                json!({"type": "object", "properties": {"path": {"type": "string", "default": "."}}}),
            ),
            |ws, args| {
                let path = ws.resolve(args.get("path").and_then(Value::as_str).unwrap_or("."))?;
                let mut names: Vec<String> = std::fs::read_dir(&path)
                    .map_err(|e| format!("cannot list {}: {e}", ws.shown(&path)))?
                    .filter_map(Result::ok)
                    .map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) { format!("{name}/") } else { name }
                    })
                    .collect();
                names.sort();
                Ok(if names.is_empty() { "(empty)".into() } else { names.join("\n") })
            },
        ),
        exec_tool(workspace, limits),
    ]
}

struct ExecTool {
    workspace: Workspace,
    limits: ToolLimits,
}

fn exec_tool(workspace: &Workspace, limits: &ToolLimits) -> Tool {
    let mut tool = Tool::new(
        spec(
            "exec",
            "Run a shell command in the workspace; returns its output (stdout and stderr).",
            json!({"type": "object", "properties": {
                "command": {"type": "string"},
                "cwd": {"type": "string", "description": "Directory inside the workspace"},
                "timeout": {"type": "number", "description": "Seconds"}}, "required": ["command"]}),
        ),
        Arc::new(ExecTool {
            workspace: workspace.clone(),
            limits: limits.clone(),
        }),
    );
    tool.terminal = true;
    tool
}

impl ToolHandler for ExecTool {
    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        let command = match text_arg(&ctx.params, "command") {
            Ok(c) => c.to_string(),
            Err(e) => return ToolReturn::Ready(Err(e.into())),
        };
        let cwd = match ctx.params.get("cwd").and_then(Value::as_str) {
            Some(dir) => match self.workspace.resolve(dir) {
                Ok(d) => d,
                Err(e) => return ToolReturn::Ready(Err(e.into())),
            },
            None => self.workspace.root().to_path_buf(),
        };
        let timeout = ctx
            .params
            .get("timeout")
            .and_then(Value::as_f64)
            .filter(|t| *t > 0.0)
            .map(Duration::from_secs_f64)
            .unwrap_or(self.limits.exec_timeout)
            .min(self.limits.exec_timeout_max);
        let cap = self.limits.exec_output_cap;
        ToolReturn::Pending(Box::pin(async move {
            run_command(command, cwd, timeout, cap)
                .await
                .map_err(Into::into)
        }))
    }
}

async fn run_command(
    command: String,
    cwd: PathBuf,
    timeout: Duration,
    cap: usize,
) -> Result<String, String> {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .current_dir(&cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start sh: {e}"))?;
    let pid = child.id();
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let collect = async {
        use tokio::io::AsyncReadExt;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let _ = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
        let status = child.wait().await;
        (out, err, status)
    };
    match tokio::time::timeout(timeout, collect).await {
        Ok((out, err, status)) => {
            let mut text = String::from_utf8_lossy(&out).into_owned();
            text.push_str(&String::from_utf8_lossy(&err));
            let mut text = cap_output(text, cap);
            match status {
                Ok(s) if s.success() => {}
                Ok(s) => text.push_str(&format!(
                    "\n[exit code: {}]",
                    s.code()
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "killed by a signal".into())
                )),
                Err(e) => text.push_str(&format!("\n[could not wait for the command: {e}]")),
            }
            Ok(text)
        }
        Err(_) => {
            if let Some(pid) = pid {
                // The whole process group: the shell and what it started.
                // SAFETY: kill(2) takes plain integers and touches no memory
                // of ours; the group id is the child's pid (it was started
                // as a group leader), so this signals only its own group.
                unsafe {
                    libc::kill(-(pid as i32), libc::SIGKILL);
                }
            }
            Ok(format!(
                "[timed out after {} s; the command was killed]",
                timeout.as_secs_f64()
            ))
        }
    }
}

/// Keep the head and the tail of long output.
fn cap_output(text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let head_end = floor_char(&text, cap / 2);
    let tail_start = ceil_char(&text, text.len() - cap / 2);
    format!(
        "{}\n[… {} bytes of output cut …]\n{}",
        &text[..head_end],
        tail_start - head_end,
        &text[tail_start..]
    )
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
fn ceil_char(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Runs a sub-agent for `delegate`; implemented by the agent loop.
pub trait SubagentRunner: Send + Sync + 'static {
    fn run(
        &self,
        parent_session: String,
        task: String,
        tools: Option<Vec<String>>,
    ) -> BoxFuture<Result<String, String>>;
}

/// Where the agent plugs itself into the `delegate` tool once it exists
/// (the tool is registered before the agent is built).
#[derive(Clone, Default)]
pub struct DelegateSlot(Arc<OnceLock<Weak<dyn SubagentRunner>>>);

impl DelegateSlot {
    pub fn connect(&self, runner: Weak<dyn SubagentRunner>) {
        let _ = self.0.set(runner);
    }
}

struct DelegateTool(DelegateSlot);

impl ToolHandler for DelegateTool {
    fn call(&self, ctx: &mut ToolCallContext) -> ToolReturn {
        let task = match text_arg(&ctx.params, "task") {
            Ok(t) => t.to_string(),
            Err(e) => return ToolReturn::Ready(Err(e.into())),
        };
        let tools = ctx.params.get("tools").and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        });
        let Some(runner) = self.0 .0.get().and_then(Weak::upgrade) else {
            return ToolReturn::Ready(Err(
                "delegate needs the agent loop (plughost run / chat)".into()
            ));
        };
        let run = runner.run(ctx.session_id.clone(), task, tools);
        ToolReturn::Pending(Box::pin(async move { run.await.map_err(Into::into) }))
    }
}

/// The `delegate` tool, connected to an agent later through `slot`.
pub fn delegate_tool(slot: &DelegateSlot) -> Tool {
    Tool::new(
        spec(
            "delegate",
            "Hand a self-contained sub-task to a sub-agent with its own session and a restricted tool set; returns its final answer.",
            json!({"type": "object", "properties": {
                "task": {"type": "string", "description": "What the sub-agent should do"},
                "tools": {"type": "array", "items": {"type": "string"}, "description": "Tools it may use (default: the file tools and exec)"}},
                "required": ["task"]}),
        ),
        Arc::new(DelegateTool(slot.clone())),
    )
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;

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
