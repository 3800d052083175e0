//! A transcript on disk: reading it, parsing its lines, and repairing what a crash left.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::Read;
use std::path::Path;

use serde_json::{json, Value};

use super::*;

/// The bytes of the transcript at `path` from byte `from` on, or `None`
/// when there is none. Opened without blocking and refused unless a
/// regular file: a FIFO or a device planted at a session's path must not
/// hang the agent.
pub(super) fn read_transcript(path: &Path, from: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::{Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;

    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file: move it away and the session starts afresh",
        ));
    }
    if from > 0 {
        file.seek(SeekFrom::Start(from))?;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// A transcript as read: the messages, the raw lines that are not a JSON
/// object (a torn last line, or damage), and whether the last message
/// lacks its newline (the next append would run into it).
pub(super) struct Parsed {
    pub(super) messages: Vec<Value>,
    pub(super) unreadable: Vec<Vec<u8>>,
    pub(super) unterminated: bool,
}

pub(super) fn parse_transcript(bytes: &[u8]) -> Parsed {
    let mut parsed = Parsed {
        messages: Vec::new(),
        unreadable: Vec::new(),
        unterminated: false,
    };
    let complete = bytes.ends_with(b"\n");
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let count = lines.len();
    for (i, line) in lines.into_iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(v) if v.is_object() => {
                parsed.messages.push(v);
                if i + 1 == count && !complete {
                    parsed.unterminated = true;
                }
            }
            _ => parsed.unreadable.push(line.to_vec()),
        }
    }
    parsed
}

/// Read a transcript for display or a first look: unreadable lines skipped
/// (and left in place; a turn's resync sets them aside).
pub(super) fn load_transcript(path: &Path) -> Vec<Value> {
    let bytes = match read_transcript(path, 0) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Vec::new(),
        Err(e) => {
            // The turn's resync reports it; nothing to show until then.
            tracing::warn!("{}: cannot read the transcript: {e}", path.display());
            return Vec::new();
        }
    };
    let parsed = parse_transcript(&bytes);
    if !parsed.unreadable.is_empty() {
        tracing::warn!(
            "{}: skipping {} unreadable line(s); the next turn sets them aside",
            path.display(),
            parsed.unreadable.len()
        );
    }
    parsed.messages
}

/// The `(id, tool name)` of each call an assistant message asks for.
pub(super) fn tool_calls_of(message: &Value) -> Vec<(String, String)> {
    if message["role"] != "assistant" {
        return Vec::new();
    }
    let Some(calls) = message["tool_calls"].as_array() else {
        return Vec::new();
    };
    calls
        .iter()
        .filter_map(|c| {
            let id = c["id"].as_str()?.to_string();
            let name = c["function"]["name"].as_str().unwrap_or("tool").to_string();
            Some((id, name))
        })
        .collect()
}

pub(super) struct Repaired {
    pub(super) messages: Vec<Value>,
    /// Tool results that answer no call before them.
    pub(super) aside: Vec<Value>,
    pub(super) answered: usize,
    pub(super) changed: bool,
}

/// Make a transcript one an OpenAI-compatible API accepts: every call of an
/// assistant message is followed by its result before the next other
/// message. A missing result is taken from a misplaced one further on (two
/// processes interleaving, before turn locks) or else written as
/// `text(tool)`; a tool result that answers nothing is set aside. Order is
/// otherwise kept, and an intact transcript comes back unchanged.
pub(super) fn repair_messages(messages: Vec<Value>, text: &dyn Fn(&str) -> String) -> Repaired {
    let is_tool = |m: &Value| m["role"] == "tool";
    let id_of = |m: &Value| m["tool_call_id"].as_str().map(str::to_string);
    // Which tool results sit where they belong: in the run of results right
    // after the assistant message that asked for them.
    let mut placed = vec![false; messages.len()];
    let mut i = 0;
    while i < messages.len() {
        let asked: HashSet<String> = tool_calls_of(&messages[i])
            .into_iter()
            .map(|c| c.0)
            .collect();
        i += 1;
        let mut seen = HashSet::new();
        while i < messages.len() && is_tool(&messages[i]) {
            if let Some(id) = id_of(&messages[i]) {
                placed[i] = asked.contains(&id) && seen.insert(id);
            }
            i += 1;
        }
    }
    let mut slots: Vec<Option<Value>> = messages.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    let mut aside = Vec::new();
    let (mut answered, mut changed) = (0, false);
    let mut i = 0;
    while i < slots.len() {
        let Some(message) = slots[i].take() else {
            i += 1; // moved into place earlier
            continue;
        };
        i += 1;
        if is_tool(&message) {
            // Not in the run after its call (placed ones are taken below).
            aside.push(message);
            changed = true;
            continue;
        }
        let calls = tool_calls_of(&message);
        out.push(message);
        if calls.is_empty() {
            continue;
        }
        let mut got = HashSet::new();
        while i < slots.len() && slots[i].as_ref().is_none_or(is_tool) {
            if placed[i] {
                let result = slots[i].take().expect("placed results are present");
                got.extend(id_of(&result));
                out.push(result);
            } else if let Some(stray) = slots[i].take() {
                aside.push(stray);
                changed = true;
            }
            i += 1;
        }
        for (id, name) in calls {
            if got.contains(&id) {
                continue;
            }
            changed = true;
            let later = (i..slots.len()).find(|&j| {
                !placed[j]
                    && slots[j]
                        .as_ref()
                        .is_some_and(|m| is_tool(m) && id_of(m).as_deref() == Some(id.as_str()))
            });
            match later {
                Some(j) => out.push(slots[j].take().expect("found above")),
                None => {
                    answered += 1;
                    out.push(json!({
                        "role": "tool",
                        "tool_call_id": id,
                        "name": name,
                        "content": text(&name),
                        "ts": now_ts(),
                    }));
                }
            }
            got.insert(id);
        }
    }
    Repaired {
        messages: out,
        aside,
        answered,
        changed,
    }
}
