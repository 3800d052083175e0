//! The `exec` tool: `sh -c` in the workspace, in a process group of its
//! own, with a timeout and an output cap.
//!
//! Output is capped while it streams (the head and the tail are kept, the
//! bytes between are only counted), so an endless `yes` costs the cap, not
//! the machine's memory. The process group is killed on timeout and when
//! the call is cancelled (its future dropped: Ctrl-C, a dispatch timeout),
//! so no child outlives a call that was given up. A child that leaves the
//! group itself (`setsid`) is beyond reach; what a command touches cannot be
//! confined — that is what `pre_tool_call` hooks are for.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::workspace::Workspace;
use super::{spec, text_arg, ToolLimits};
use crate::core::hooks::ToolCallContext;
use crate::core::registry::{Tool, ToolHandler, ToolReturn};

struct ExecTool {
    workspace: Workspace,
    limits: ToolLimits,
}

pub(super) fn exec_tool(workspace: &Workspace, limits: &ToolLimits) -> Tool {
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
            Some(dir) => match self
                .workspace
                .target(dir)
                .and_then(|t| self.workspace.directory_path(&t))
            {
                Ok(d) => d,
                Err(e) => return ToolReturn::Ready(Err(e.to_string().into())),
            },
            None => self.workspace.root().to_path_buf(),
        };
        let timeout = ctx
            .params
            .get("timeout")
            .and_then(Value::as_f64)
            .filter(|t| *t > 0.0)
            .and_then(|t| Duration::try_from_secs_f64(t).ok())
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

/// Kills a process group when dropped, unless disarmed: whatever ends the
/// call (a timeout, a cancelled future, a panic) ends the command with it.
struct GroupKill {
    pgid: Option<i32>,
}

impl GroupKill {
    /// Once the shell has been reaped its pid may be reused: never signal it after.
    fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            // SAFETY: kill(2) takes plain integers and touches no memory of
            // ours. The group id is the shell's pid (it was started as a
            // group leader) and the shell has not been reaped yet (the guard
            // is disarmed once it is), so the id still names its own group.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

pub(super) async fn run_command(
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
    // Declared after `child`, so dropped before it: the group is signalled
    // while the shell is still unreaped.
    let mut group = GroupKill {
        pgid: child.id().and_then(|pid| i32::try_from(pid).ok()),
    };
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let mut out = Capture::new(cap);
    let mut err = Capture::new(cap);
    let collect = async {
        let _ = tokio::join!(drain(stdout, &mut out), drain(stderr, &mut err));
        child.wait().await
    };
    match tokio::time::timeout(timeout, collect).await {
        Ok(status) => {
            group.disarm();
            let mut text = render(&[&out, &err], cap);
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
            // The whole process group: the shell and what it started.
            drop(group);
            let mut text = render(&[&out, &err], cap);
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&format!(
                "[timed out after {} s; the command was killed]",
                timeout.as_secs_f64()
            ));
            Ok(text)
        }
    }
}

/// Read a pipe to its end into `capture`, a chunk at a time.
async fn drain(mut pipe: impl AsyncRead + Unpin, capture: &mut Capture) -> std::io::Result<()> {
    let mut chunk = vec![0u8; 8192];
    loop {
        let n = pipe.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        capture.push(&chunk[..n]);
    }
}

/// One stream's output within a cap: the first `cap / 2` bytes, the last
/// `cap - cap / 2`, and a count of those in between.
#[derive(Debug)]
pub(super) struct Capture {
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    dropped: u64,
}

impl Capture {
    pub(super) fn new(cap: usize) -> Capture {
        Capture {
            head: Vec::new(),
            head_cap: cap / 2,
            tail: VecDeque::new(),
            tail_cap: cap - cap / 2,
            dropped: 0,
        }
    }

    pub(super) fn push(&mut self, mut data: &[u8]) {
        let room = self.head_cap - self.head.len();
        let (head, rest) = data.split_at(room.min(data.len()));
        self.head.extend_from_slice(head);
        data = rest;
        if data.len() >= self.tail_cap {
            self.dropped += (self.tail.len() + data.len() - self.tail_cap) as u64;
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.dropped += overflow as u64;
            self.tail.extend(data);
        }
    }
}

/// Streams one after the other (stdout, then stderr) as text within `cap`
/// bytes: whole when it fits, else its head and tail around a
/// `[… N bytes of output cut …]` line counting everything left out.
///
/// A stream only drops bytes once its head is full and its tail is full
/// again after them, so the first `cap / 2` and the last `cap - cap / 2`
/// bytes of the whole are always among those kept.
pub(super) fn render(streams: &[&Capture], cap: usize) -> String {
    let total: u64 = streams
        .iter()
        .map(|s| (s.head.len() + s.tail.len()) as u64 + s.dropped)
        .sum();
    let kept: Vec<u8> = streams
        .iter()
        .flat_map(|s| s.head.iter().chain(s.tail.iter()).copied())
        .collect();
    if total <= cap as u64 {
        return String::from_utf8_lossy(&kept).into_owned();
    }
    let head_len = (cap / 2).min(kept.len());
    let tail_len = (cap - cap / 2).min(kept.len() - head_len);
    let head = utf8_head(&kept[..head_len]);
    let tail = utf8_tail(&kept[kept.len() - tail_len..]);
    format!(
        "{}\n[… {} bytes of output cut …]\n{}",
        String::from_utf8_lossy(head),
        total - (head.len() + tail.len()) as u64,
        String::from_utf8_lossy(tail)
    )
}

/// `bytes` without a character cut short at its end.
fn utf8_head(bytes: &[u8]) -> &[u8] {
    // A character is at most 4 bytes: look at the last 3 for a lead byte
    // whose sequence does not fit.
    for back in 1..=bytes.len().min(3) {
        let b = bytes[bytes.len() - back];
        if b & 0xC0 == 0x80 {
            continue; // a continuation byte: keep looking for its lead
        }
        let needed = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if needed > back {
            &bytes[..bytes.len() - back]
        } else {
            bytes
        };
    }
    bytes
}

/// `bytes` without the continuation bytes of a character cut short at its start.
fn utf8_tail(bytes: &[u8]) -> &[u8] {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|b| **b & 0xC0 == 0x80)
        .count();
    &bytes[skip..]
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The old cut, on the whole output at once: the reference.
    fn reference(whole: &[u8], cap: usize) -> (Vec<u8>, Vec<u8>) {
        if whole.len() <= cap {
            return (whole.to_vec(), Vec::new());
        }
        (
            whole[..cap / 2].to_vec(),
            whole[whole.len() - (cap - cap / 2)..].to_vec(),
        )
    }

    proptest! {
        /// Streaming in arbitrary chunks keeps exactly the head and the tail
        /// a cut of the whole output would keep, and counts the rest.
        #[test]
        fn streaming_keeps_what_a_cut_of_the_whole_would(
            out in prop::collection::vec(prop::collection::vec(b'a'..=b'z', 0..40), 0..12),
            err in prop::collection::vec(prop::collection::vec(b'A'..=b'Z', 0..40), 0..12),
            cap in 0usize..64,
        ) {
            let (mut o, mut e) = (Capture::new(cap), Capture::new(cap));
            for chunk in &out { o.push(chunk); }
            for chunk in &err { e.push(chunk); }
            let whole: Vec<u8> = out.concat().into_iter().chain(err.concat()).collect();
            let text = render(&[&o, &e], cap);
            let (head, tail) = reference(&whole, cap);
            if whole.len() <= cap {
                prop_assert_eq!(text.as_bytes(), &whole[..]);
            } else {
                let expected = format!(
                    "{}\n[… {} bytes of output cut …]\n{}",
                    String::from_utf8_lossy(&head),
                    whole.len() - head.len() - tail.len(),
                    String::from_utf8_lossy(&tail)
                );
                prop_assert_eq!(text, expected);
            }
            for c in [&o, &e] {
                prop_assert!(c.head.len() + c.tail.len() <= cap);
            }
        }
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        let mut c = Capture::new(7);
        c.push("ééééééééé".as_bytes());
        let text = render(&[&c], 7);
        assert!(!text.contains('\u{FFFD}'), "{text}");
        assert_eq!(text, "é\n[… 12 bytes of output cut …]\néé");
    }
}
