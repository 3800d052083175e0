//! Decoding a Chat Completions answer: the streamed form (`text/event-stream`
//! of `chat.completion.chunk` objects) and the plain JSON completion a
//! server that ignores `stream` sends. Kept apart from the network so any
//! split of any bytes can be tested.
//!
//! Every buffer is bounded ([`Limits`]): the answer's total size, one line's
//! size, the number of tool calls. Events are read into typed structs, never
//! into free-form JSON values, so a hostile line costs memory in proportion
//! to its bytes and no more; the one free-form field, `usage`, keeps only
//! numbers, strings, booleans and shallow objects of those.
//!
//! An answer counts only when it is complete: `[DONE]` or a `finish_reason`
//! was seen. Anything else is [`SseError::Incomplete`] — never an answer, so
//! a tool call cut in half is never run.

use serde_json::{Map, Value};

use super::{ChatResponse, ToolCallRequest};

mod wire;

use wire::{Chunk, Completion, Fragment, Usage};

/// Tool calls accepted in one answer; a fragment's `index` must be below
/// this (an index is a position to fill, so a huge one must not allocate).
pub const MAX_TOOL_CALLS: usize = 128;

/// Size bounds on one answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of the whole answer body.
    pub max_total: usize,
    /// Bytes of one line of the stream (one event's data).
    pub max_line: usize,
}

impl Default for Limits {
    /// 16 MiB an answer (a model's longest answers are well under 1 MiB),
    /// 1 MiB a line (servers stream small deltas).
    fn default() -> Limits {
        Limits {
            max_total: 16 << 20,
            max_line: 1 << 20,
        }
    }
}

/// Why an answer could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("the answer passed {limit} bytes and reading stopped (a runaway or endless stream)")]
    TooLarge { limit: usize },
    #[error("one line of the stream passed {limit} bytes")]
    LineTooLong { limit: usize },
    #[error(
        "a tool call with index {index}; at most {limit} tool calls are accepted in one answer"
    )]
    ToolIndex { index: u64, limit: usize },
    #[error("bad stream event: {0}")]
    BadEvent(String),
    #[error("bad completion: {0}")]
    BadCompletion(String),
    /// The server reported an error inside a 200 answer.
    #[error("{0}")]
    Api(String),
    /// The body ended before `[DONE]` or a `finish_reason` (or, for a plain
    /// completion, mid-document): a dropped connection, worth a retry.
    #[error("the answer ended before it was complete (no finish_reason and no [DONE])")]
    Incomplete,
}

/// Incremental decoder of one streamed answer: [`feed`](Self::feed) it the
/// body's chunks as they come, then [`finish`](Self::finish).
#[derive(Debug)]
pub struct StreamParser {
    limits: Limits,
    /// The current line, not yet ended by `\n`.
    line: Vec<u8>,
    seen: usize,
    done: bool,
    text: String,
    calls: Vec<PartialCall>,
    usage: Map<String, Value>,
    finish_reason: Option<String>,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

impl StreamParser {
    pub fn new(limits: Limits) -> StreamParser {
        StreamParser {
            limits,
            line: Vec::new(),
            seen: 0,
            done: false,
            text: String::new(),
            calls: Vec::new(),
            usage: Map::new(),
            finish_reason: None,
        }
    }

    /// `[DONE]` was seen: nothing more needs reading.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Take the next bytes of the body; returns the text deltas they
    /// completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<String>, SseError> {
        let mut deltas = Vec::new();
        if self.done {
            return Ok(deltas);
        }
        self.seen = self.seen.saturating_add(chunk.len());
        if self.seen > self.limits.max_total {
            return Err(SseError::TooLarge {
                limit: self.limits.max_total,
            });
        }
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.extend_line(&rest[..end])?;
            let line = std::mem::take(&mut self.line);
            self.event_line(&line, &mut deltas)?;
            rest = &rest[end + 1..];
            if self.done {
                return Ok(deltas);
            }
        }
        self.extend_line(rest)?;
        Ok(deltas)
    }

    /// The body ended: the answer, with the text deltas of an unterminated
    /// last line, or [`SseError::Incomplete`] when it never finished.
    pub fn finish(mut self) -> Result<(ChatResponse, Vec<String>), SseError> {
        let mut deltas = Vec::new();
        if !self.done && !self.line.is_empty() {
            // A last line without its newline: use it if it is whole; a
            // line cut mid-event means the connection dropped.
            let line = std::mem::take(&mut self.line);
            match self.event_line(&line, &mut deltas) {
                Ok(()) => {}
                Err(SseError::BadEvent(_)) => return Err(SseError::Incomplete),
                Err(e) => return Err(e),
            }
        }
        if !self.done && self.finish_reason.is_none() {
            return Err(SseError::Incomplete);
        }
        let finish_reason = self.finish_reason.unwrap_or_default();
        let response = ChatResponse {
            text: self.text,
            tool_calls: assemble(self.calls),
            usage: self.usage,
            truncated: finish_reason == "length",
            finish_reason,
        };
        Ok((response, deltas))
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > self.limits.max_line {
            return Err(SseError::LineTooLong {
                limit: self.limits.max_line,
            });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// One complete line: `data:` lines carry events; comments (`:`),
    /// `event:`, `id:` and anything else are skipped.
    fn event_line(&mut self, line: &[u8], deltas: &mut Vec<String>) -> Result<(), SseError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return Ok(());
        };
        let data = data.trim_ascii();
        if data.is_empty() {
            return Ok(());
        }
        if data == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        // `data: null` carries nothing: skipped, as other clients do.
        let Some(chunk): Option<Chunk> =
            serde_json::from_slice(data).map_err(|e| SseError::BadEvent(e.to_string()))?
        else {
            return Ok(());
        };
        if let Some(error) = chunk.error {
            return Err(SseError::Api(error.0));
        }
        if let Some(Usage(usage)) = chunk.usage {
            self.usage = usage;
        }
        let Some(choice) = chunk.choices else {
            return Ok(());
        };
        if let Some(reason) = choice.finish_reason {
            self.finish_reason = Some(reason);
        }
        let Some(delta) = choice.delta else {
            return Ok(());
        };
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            self.text.push_str(&text);
            deltas.push(text);
        }
        for fragment in delta.tool_calls {
            let index = self.slot(&fragment)?;
            if self.calls.len() <= index {
                self.calls.resize_with(index + 1, PartialCall::default);
            }
            let call = &mut self.calls[index];
            if let Some(id) = fragment.id {
                call.id = id;
            }
            if let Some(function) = fragment.function {
                if let Some(name) = function.name {
                    call.name.push_str(&name);
                }
                if let Some(arguments) = function.arguments {
                    call.arguments.push_str(&arguments);
                }
            }
        }
        Ok(())
    }

    /// Which call a fragment continues. Without an `index` (some servers
    /// omit it), a fragment with a new `id` starts a call and one without
    /// continues the last.
    fn slot(&self, fragment: &Fragment) -> Result<usize, SseError> {
        let index = match fragment.index {
            Some(index) => index,
            None => {
                let starts_new = match (self.calls.last(), &fragment.id) {
                    (None, _) => true,
                    (Some(last), Some(id)) => !last.id.is_empty() && last.id != *id,
                    (Some(_), None) => false,
                };
                let len = self.calls.len() as u64;
                if starts_new {
                    len
                } else {
                    len - 1
                }
            }
        };
        usize::try_from(index)
            .ok()
            .filter(|&i| i < MAX_TOOL_CALLS)
            .ok_or(SseError::ToolIndex {
                index,
                limit: MAX_TOOL_CALLS,
            })
    }
}

/// The finished calls, in index order; a slot no fragment named is dropped.
fn assemble(calls: Vec<PartialCall>) -> Vec<ToolCallRequest> {
    calls
        .into_iter()
        .enumerate()
        .filter(|(_, c)| !c.name.is_empty())
        .map(|(i, c)| ToolCallRequest {
            id: if c.id.is_empty() {
                format!("call_{i}")
            } else {
                c.id
            },
            name: c.name,
            arguments: if c.arguments.trim().is_empty() {
                "{}".into()
            } else {
                c.arguments
            },
        })
        .collect()
}

/// Decode a whole (non-streamed) completion body, already bounded in size
/// by the caller. A document cut short is [`SseError::Incomplete`].
pub fn parse_completion(body: &[u8]) -> Result<ChatResponse, SseError> {
    let completion: Completion = serde_json::from_slice(body).map_err(|e| {
        if e.is_eof() {
            SseError::Incomplete
        } else {
            SseError::BadCompletion(e.to_string())
        }
    })?;
    if let Some(error) = completion.error {
        return Err(SseError::Api(error.0));
    }
    let Some(choice) = completion.choices else {
        return Err(SseError::BadCompletion("it has no choices".into()));
    };
    let Some(message) = choice.message else {
        return Err(SseError::BadCompletion(
            "its first choice has no message".into(),
        ));
    };
    let calls = message.tool_calls;
    let finish_reason = choice.finish_reason.unwrap_or_default();
    Ok(ChatResponse {
        text: message.content.unwrap_or_default(),
        tool_calls: calls
            .into_iter()
            .map(|c| {
                let function = c.function.unwrap_or_default();
                ToolCallRequest {
                    id: c.id.unwrap_or_default(),
                    name: function.name.unwrap_or_default(),
                    arguments: function
                        .arguments
                        .filter(|a| !a.trim().is_empty())
                        .unwrap_or_else(|| "{}".into()),
                }
            })
            .collect(),
        usage: completion.usage.map(|u| u.0).unwrap_or_default(),
        truncated: finish_reason == "length",
        finish_reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<(ChatResponse, Vec<String>), SseError> {
        let mut p = StreamParser::new(Limits::default());
        let mut deltas = p.feed(bytes)?;
        let (response, tail) = p.finish()?;
        deltas.extend(tail);
        Ok((response, deltas))
    }

    #[test]
    fn text_tool_calls_and_usage() {
        let body = concat!(
            ": keep-alive\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hi \"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"ls\",\"arguments\":\"{\\\"p\\\"\"}}]}}]}\r\n\r\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"total_tokens\":5,\"details\":{\"cached\":1,\"deep\":{\"x\":1}},\"list\":[1,2]}}\n\n",
            "data: [DONE]\n\n",
            "data: ignored after done\n",
        );
        let (r, deltas) = parse(body.as_bytes()).unwrap();
        assert_eq!(r.text, "Hi ");
        assert_eq!(deltas, ["Hi "]);
        assert_eq!(r.finish_reason, "tool_calls");
        assert_eq!(
            r.tool_calls,
            [ToolCallRequest {
                id: "c1".into(),
                name: "ls".into(),
                arguments: "{\"p\":1}".into()
            }]
        );
        assert_eq!(
            Value::Object(r.usage),
            serde_json::json!({"total_tokens": 5, "details": {"cached": 1}})
        );
    }

    #[test]
    fn a_cut_stream_is_incomplete_never_an_answer() {
        let cut = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"exec\",\"arguments\":\"{\\\"command\\\": \\\"rm -rf /tmp/x\"}}]}}]}\n\n";
        assert_eq!(parse(cut.as_bytes()).unwrap_err(), SseError::Incomplete);
        let mid_line = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel";
        assert_eq!(
            parse(mid_line.as_bytes()).unwrap_err(),
            SseError::Incomplete
        );
        assert_eq!(parse(b"").unwrap_err(), SseError::Incomplete);
        // A finish_reason is enough without [DONE], even on an unterminated last line.
        let finished =
            "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}";
        let (r, deltas) = parse(finished.as_bytes()).unwrap();
        assert_eq!((r.text.as_str(), deltas.len()), ("ok", 1));
    }

    #[test]
    fn limits_are_errors_not_allocations() {
        let huge = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":18446744073709551615,\"function\":{\"name\":\"x\"}}]}}]}\n";
        assert_eq!(
            parse(huge.as_bytes()).unwrap_err(),
            SseError::ToolIndex {
                index: u64::MAX,
                limit: MAX_TOOL_CALLS
            }
        );
        let many: Vec<String> = (0..=MAX_TOOL_CALLS)
            .map(|i| format!("{{\"index\":{}}}", i % 2))
            .collect();
        let many = format!(
            "data: {{\"choices\":[{{\"delta\":{{\"tool_calls\":[{}]}}}}]}}\n",
            many.join(",")
        );
        assert!(matches!(
            parse(many.as_bytes()).unwrap_err(),
            SseError::BadEvent(e) if e.contains("at most 128 tool calls")
        ));
        let nulls = "data: {\"choices\":null,\"usage\":null,\"error\":null}\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":null},\"finish_reason\":\"stop\"},{\"x\":1}]}\n";
        assert!(parse(nulls.as_bytes()).is_ok());
        let limits = Limits {
            max_total: 100,
            max_line: 10,
        };
        let mut p = StreamParser::new(limits);
        assert_eq!(
            p.feed(b"data: 12345").unwrap_err(),
            SseError::LineTooLong { limit: 10 }
        );
        let mut p = StreamParser::new(limits);
        for _ in 0..10 {
            p.feed(b"\n\n\n\n\n\n\n\n\n\n").unwrap();
        }
        assert_eq!(
            p.feed(b"\n").unwrap_err(),
            SseError::TooLarge { limit: 100 }
        );
    }

    #[test]
    fn errors_in_the_stream_and_missing_indices() {
        let err = "data: {\"error\":{\"message\":\"overloaded\",\"code\":1}}\n";
        assert_eq!(
            parse(err.as_bytes()).unwrap_err(),
            SseError::Api("overloaded".into())
        );
        let no_index = concat!(
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}}]}\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"}\"}}]}}]}\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"b\",\"function\":{\"name\":\"g\"}}]}}]}\n",
            "data: [DONE]\n",
        );
        let (r, _) = parse(no_index.as_bytes()).unwrap();
        let calls: Vec<_> = r
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(calls, [("a", "f", "{}"), ("b", "g", "{}")]);
    }

    #[test]
    fn nulls_where_a_value_may_be_are_skipped_as_other_clients_do() {
        let body = concat!(
            "data: null\n\n",
            "data: {\"choices\":[null,{\"delta\":{\"content\":\"Hi\",\"tool_calls\":[null,{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"ls\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}],\"usage\":null,\"error\":null}\n\n",
            "data: {\"choices\":[{\"delta\":null,\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (r, deltas) = parse(body.as_bytes()).unwrap();
        assert_eq!((r.text.as_str(), deltas), ("Hi", vec!["Hi".to_string()]));
        assert_eq!(r.finish_reason, "tool_calls");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "ls");
    }

    #[test]
    fn malformed_text_fields_are_skipped_not_fatal() {
        let body = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":5}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":{\"a\":[1]}}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":7}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":[\"x\"]},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (r, deltas) = parse(body.as_bytes()).unwrap();
        assert_eq!((r.text.as_str(), deltas), ("ok", vec!["ok".to_string()]));
        assert_eq!(r.finish_reason, "stop");
        let whole = br#"{"choices":[{"message":{"content":5},"finish_reason":"stop"}]}"#;
        assert_eq!(parse_completion(whole).unwrap().text, "");
    }

    #[test]
    fn plain_completions() {
        let body = br#"{"choices":[{"message":{"content":"hi","tool_calls":[{"id":"x","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"total_tokens":3}}"#;
        let r = parse_completion(body).unwrap();
        assert_eq!(r.text, "hi");
        assert_eq!(r.tool_calls[0].arguments, "{\"a\":1}");
        assert_eq!(r.usage["total_tokens"], 3);
        assert_eq!(
            parse_completion(&body[..40]).unwrap_err(),
            SseError::Incomplete
        );
        assert!(matches!(
            parse_completion(b"{}").unwrap_err(),
            SseError::BadCompletion(_)
        ));
        assert!(matches!(
            parse_completion(
                br#"{"choices":[{"message":{"tool_calls":[{"function":{"arguments":{"a":1}}}]}}]}"#
            )
            .unwrap_err(),
            SseError::BadCompletion(_)
        ));
    }
}
