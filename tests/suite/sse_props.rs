//! Property tests for decoding a streamed model answer
//! (`plughost::agent::provider::sse`): any split of a valid stream decodes
//! exactly as the whole does; any bytes decode or fail cleanly, never panic,
//! and hold memory within a fixed multiple of the limits.

use plughost::agent::provider::sse::{parse_completion, Limits, SseError, StreamParser};
use plughost::agent::provider::{ChatResponse, ToolCallRequest};
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::alloc_count::peak_during;

/// Decode `chunks` in order: the answer and every text delta, or the error.
fn decode<'a>(
    limits: Limits,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<(ChatResponse, Vec<String>), SseError> {
    let mut parser = StreamParser::new(limits);
    let mut deltas = Vec::new();
    for chunk in chunks {
        deltas.extend(parser.feed(chunk)?);
        if parser.is_done() {
            break;
        }
    }
    let (answer, tail) = parser.finish()?;
    deltas.extend(tail);
    Ok((answer, deltas))
}

/// `bytes` cut at `cuts` (positions, any order, out-of-range ones folded in).
fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    at.sort_unstable();
    let mut parts = Vec::new();
    let mut start = 0;
    for cut in at {
        parts.push(&bytes[start..cut]);
        start = cut;
    }
    parts.push(&bytes[start..]);
    parts
}

/// One model answer as the test builds it, and as a server would stream it.
#[derive(Clone, Debug)]
struct Answer {
    texts: Vec<String>,
    /// Each call: id, name, argument pieces.
    calls: Vec<(String, String, Vec<String>)>,
    finish: Option<String>,
    done: bool,
    crlf: bool,
    comments: bool,
}

impl Answer {
    fn events(&self) -> Vec<Value> {
        let mut events = vec![json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})];
        for text in &self.texts {
            events.push(json!({"choices": [{"index": 0, "delta": {"content": text}}]}));
        }
        for (i, (id, name, pieces)) in self.calls.iter().enumerate() {
            events.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}}]}));
            for piece in pieces {
                events.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": i, "function": {"arguments": piece}}]}}]}));
            }
        }
        if let Some(reason) = &self.finish {
            events.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}));
        }
        events.push(json!({"choices": [], "usage": {"total_tokens": 7, "completion_tokens_details": {"reasoning_tokens": 2}}}));
        events
    }

    fn bytes(&self) -> Vec<u8> {
        let nl = if self.crlf { "\r\n" } else { "\n" };
        let mut out = String::new();
        for event in self.events() {
            if self.comments {
                out.push_str(&format!(": keep-alive{nl}"));
            }
            out.push_str(&format!("data: {event}{nl}{nl}"));
        }
        if self.done {
            out.push_str(&format!("data: [DONE]{nl}{nl}"));
        }
        out.into_bytes()
    }

    fn complete(&self) -> bool {
        self.done || self.finish.is_some()
    }
}

fn answers() -> impl Strategy<Value = Answer> {
    let text = "\\PC{0,12}|[é€😀]{1,4}";
    let call = (
        "[a-z0-9_]{1,8}",
        "[a-z_]{1,10}",
        prop::collection::vec(text, 0..4),
    );
    (
        prop::collection::vec(text, 0..6),
        prop::collection::vec(call, 0..3),
        prop::option::of(prop::sample::select(vec!["stop", "tool_calls", "length"])),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(texts, calls, finish, done, crlf, comments)| Answer {
            texts,
            calls: calls
                .into_iter()
                .map(|(id, name, pieces)| (format!("call_{id}"), name, pieces))
                .collect(),
            finish: finish.map(str::to_string),
            done,
            crlf,
            comments,
        })
}

/// `cases` per property, and no failure files written into the source tree.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Arbitrary JSON, for events of the right framing and any content.
fn json_values() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop::sample::select(vec![
                        "choices",
                        "delta",
                        "content",
                        "tool_calls",
                        "index",
                        "id",
                        "function",
                        "name",
                        "arguments",
                        "finish_reason",
                        "usage",
                        "error",
                        "message",
                    ]),
                    inner
                ),
                0..6
            )
            .prop_map(|kv| Value::Object(
                kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}

proptest! {
    #![proptest_config(config(256))]

    /// Any split of a valid stream decodes exactly as the whole does, and
    /// to what was sent; a stream that never finished is never an answer.
    #[test]
    fn splits_decode_as_the_whole(answer in answers(), cuts in prop::collection::vec(any::<usize>(), 0..24)) {
        let bytes = answer.bytes();
        let whole = decode(Limits::default(), [bytes.as_slice()]);
        let parts = decode(Limits::default(), split(&bytes, &cuts));
        prop_assert_eq!(&whole, &parts);
        let bytewise = decode(Limits::default(), bytes.chunks(1));
        prop_assert_eq!(&whole, &bytewise);
        if !answer.complete() {
            prop_assert_eq!(whole, Err(SseError::Incomplete));
            return Ok(());
        }
        let (response, deltas) = whole.unwrap();
        let text: String = answer.texts.concat();
        prop_assert_eq!(&response.text, &text);
        prop_assert_eq!(deltas.concat(), text);
        let calls: Vec<ToolCallRequest> = answer
            .calls
            .iter()
            .map(|(id, name, pieces)| ToolCallRequest {
                id: id.clone(),
                name: name.clone(),
                arguments: if pieces.concat().trim().is_empty() { "{}".into() } else { pieces.concat() },
            })
            .collect();
        prop_assert_eq!(response.tool_calls, calls);
        prop_assert_eq!(response.usage["total_tokens"].as_u64(), Some(7));
    }

    /// Cutting a complete stream anywhere before its end marker is never an answer.
    #[test]
    fn a_cut_stream_is_never_an_answer(answer in answers(), at in any::<prop::sample::Index>()) {
        let answer = Answer { finish: None, done: true, ..answer };
        let bytes = answer.bytes();
        let marker = bytes.len() - if answer.crlf { 16 } else { 14 };
        let cut = at.index(marker + 1);
        prop_assert_eq!(decode(Limits::default(), [&bytes[..cut]]), Err(SseError::Incomplete));
    }

    /// Arbitrary bytes, arbitrarily split: an answer or an error, never a panic.
    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..2048), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        let _ = decode(Limits::default(), split(&bytes, &cuts));
        let _ = parse_completion(&bytes);
    }

    /// A valid stream with bytes flipped, dropped or inserted: never a panic.
    #[test]
    fn mangled_streams_never_panic(answer in answers(), edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..8)) {
        let mut bytes = answer.bytes();
        for (at, byte, kind) in edits {
            let i = at.index(bytes.len().max(1));
            match (kind, bytes.is_empty()) {
                (0, false) => bytes[i] = byte,
                (1, false) => { bytes.remove(i); }
                _ => bytes.insert(i.min(bytes.len()), byte),
            }
        }
        let _ = decode(Limits::default(), [bytes.as_slice()]);
        let _ = parse_completion(&bytes);
    }

    /// Well-framed events with any JSON inside: never a panic, and an index
    /// too large is an error, not an allocation.
    #[test]
    fn any_json_events_never_panic(values in prop::collection::vec(json_values(), 0..6), index in any::<u64>()) {
        let mut body = String::new();
        for v in &values {
            body.push_str(&format!("data: {v}\n\n"));
        }
        let _ = decode(Limits::default(), [body.as_bytes()]);
        let _ = parse_completion(body.as_bytes());
        let fragment = json!({"choices": [{"delta": {"tool_calls": [{"index": index, "function": {"name": "f"}}]}}]});
        let result = decode(Limits::default(), [format!("data: {fragment}\n\ndata: [DONE]\n").as_bytes()]);
        if index >= 128 {
            prop_assert!(matches!(result, Err(SseError::ToolIndex { .. })), "{result:?}");
        } else {
            prop_assert!(result.is_ok());
        }
    }
}

/// Small limits, so each case stays fast while the input runs far past them.
const SMALL: Limits = Limits {
    max_total: 2 << 20,
    max_line: 128 << 10,
};

/// What the decoder may hold at once: the answer it kept (at most the
/// total, its strings grown by doubling), the line being read, and a parse
/// of one line at a small multiple of its size.
const MEMORY_BOUND: usize = 2 * (2 << 20) + 16 * (128 << 10);

proptest! {
    #![proptest_config(config(12))]

    /// Endless input of any repeated shape — no newlines, one endless line,
    /// endless valid events, endless arrays or objects inside an event —
    /// ends in an error at a limit, holding memory within a fixed bound.
    #[test]
    fn endless_input_is_bounded(
        unit in prop_oneof![
            prop::collection::vec(any::<u8>(), 1..64),
            Just(b"[],".to_vec()),
            Just(b"{},".to_vec()),
            Just(b"{\"index\":0},".to_vec()),
            Just(b"\"aaaaaaaaaaaaaaaa\",".to_vec()),
            Just(b"data: {\"choices\":[{\"delta\":{\"content\":\"more \"}}]}\n\n".to_vec()),
            Just(b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"xxxxxxxx\"}}]}}]}\n".to_vec()),
            Just(b": ping\n".to_vec()),
        ],
        prefix in prop::sample::select(vec![
            "",
            "data: {\"choices\":[",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[",
            "data: {\"usage\":{\"a\":[",
            "data: {\"error\":{\"x\":[",
        ]),
        chunk in 1usize << 10..64 << 10,
    ) {
        // Lines of units: a unit that is a whole event repeats as events;
        // inside an event it repeats until the line limit.
        let mut line = prefix.as_bytes().to_vec();
        while line.len() < SMALL.max_line - unit.len() - 8 {
            line.extend_from_slice(&unit);
        }
        line.push(b'\n');
        // The input, built before measuring: lines repeated past the limit.
        let input: Vec<u8> = line.iter().copied().cycle().take(SMALL.max_total + 2 * chunk).collect();
        let mut result = Ok(());
        let mut done = false;
        let peak = peak_during(|| {
            let mut parser = StreamParser::new(SMALL);
            for piece in input.chunks(chunk) {
                if let Err(e) = parser.feed(piece) {
                    result = Err(e);
                    break;
                }
                // Random bytes that spelled `data: [DONE]` end the answer.
                done = parser.is_done();
                if done {
                    break;
                }
            }
        });
        prop_assert!(result.is_err() || done, "an endless stream must end in an error");
        prop_assert!(peak < MEMORY_BOUND + chunk, "held {peak} bytes");
    }
}

/// Endless valid text: the answer grows to the limit, then an error; the
/// memory held is the answer's text and not a copy more.
#[test]
fn endless_valid_text_stops_at_the_limit() {
    let event = b"data: {\"choices\":[{\"delta\":{\"content\":\"more and more \"}}]}\n\n";
    let input: Vec<u8> = event
        .iter()
        .copied()
        .cycle()
        .take(3 * SMALL.max_total)
        .collect();
    let mut result = Ok(Vec::new());
    let peak = peak_during(|| {
        let mut parser = StreamParser::new(SMALL);
        for piece in input.chunks(16 << 10) {
            result = parser.feed(piece).map(|_| Vec::<String>::new());
            if result.is_err() {
                break;
            }
        }
    });
    assert_eq!(
        result,
        Err(SseError::TooLarge {
            limit: SMALL.max_total
        })
    );
    assert!(peak < MEMORY_BOUND, "held {peak} bytes");
}
