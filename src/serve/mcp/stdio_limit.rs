//! A bound on one MCP stdio message that answers instead of staying silent:
//! rmcp drops a line past its limit with only a log line, so the client
//! waits forever for that request. Here the line is discarded as it streams
//! in (never buffered whole) and the client gets a JSON-RPC error for it
//! (`-32600`, with the request's `id` when it can be read from the line's
//! first bytes, else `null`). Lines pass between the real descriptors and
//! rmcp through two in-memory pipes; the answers rmcp writes and the errors
//! written here are interleaved only at line boundaries.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};

/// How much of a too-long line is searched for its `id`.
const ID_PREFIX: usize = 4096;

/// The pipes rmcp serves on, wired to `input`/`output` with messages
/// longer than `max` bytes answered with an error; and the task writing
/// `output`, to await once rmcp is done (so its last answers are written).
pub(super) fn bounded<R, W>(
    input: R,
    output: W,
    max: usize,
) -> (DuplexStream, DuplexStream, tokio::task::JoinHandle<()>)
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (rmcp_in, mut to_rmcp) = tokio::io::duplex(64 * 1024);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(64 * 1024);
    let (errors, errors_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        let mut input = BufReader::with_capacity(64 * 1024, input);
        let mut line = Vec::new();
        loop {
            match read_bounded_line(&mut input, &mut line, max).await {
                Ok(Line::Whole) => {
                    if to_rmcp.write_all(&line).await.is_err() {
                        break;
                    }
                }
                Ok(Line::TooLong { id, length }) => {
                    let _ = errors.send(too_long_answer(id, length, max));
                }
                Ok(Line::End) | Err(_) => break,
            }
        }
        // Dropping `to_rmcp` ends rmcp's input: the session ends as on EOF.
    });
    let writer = tokio::spawn(write_lines(from_rmcp, output, errors_rx));
    (rmcp_in, rmcp_out, writer)
}

enum Line {
    Whole,
    TooLong {
        id: serde_json::Value,
        length: usize,
    },
    End,
}

/// Read one `\n`-terminated line into `line` (cleared first), never
/// holding more than `max` bytes of it.
async fn read_bounded_line<R: AsyncRead + Unpin>(
    input: &mut BufReader<R>,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    line.clear();
    let mut length = 0usize;
    let mut prefix: Option<Vec<u8>> = None;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            // EOF: a last line without its newline is passed on as it is.
            return Ok(match prefix {
                Some(p) => Line::TooLong {
                    id: id_of(&p),
                    length,
                },
                None if line.is_empty() => Line::End,
                None => Line::Whole,
            });
        }
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..=i], true),
            None => (buf, false),
        };
        let taken = chunk.len();
        length += taken;
        match &mut prefix {
            Some(_) => {}
            None if length > max => {
                let mut p = std::mem::take(line);
                p.extend_from_slice(&chunk[..chunk.len().min(ID_PREFIX)]);
                p.truncate(ID_PREFIX);
                prefix = Some(p);
            }
            None => line.extend_from_slice(chunk),
        }
        input.consume(taken);
        if done {
            return Ok(match prefix {
                Some(p) => Line::TooLong {
                    id: id_of(&p),
                    length,
                },
                None => Line::Whole,
            });
        }
    }
}

/// The `id` of a JSON-RPC request from the first bytes of its text, when
/// a top-level-looking `"id":` with a number or string is there.
fn id_of(prefix: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(prefix);
    let Some(at) = text.find("\"id\"") else {
        return serde_json::Value::Null;
    };
    let rest = text[at + 4..].trim_start();
    let Some(rest) = rest.strip_prefix(':') else {
        return serde_json::Value::Null;
    };
    let rest = rest.trim_start();
    let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<serde_json::Value>();
    match stream.next() {
        Some(Ok(v @ (serde_json::Value::Number(_) | serde_json::Value::String(_)))) => v,
        _ => serde_json::Value::Null,
    }
}

fn too_long_answer(id: serde_json::Value, length: usize, max: usize) -> Vec<u8> {
    let answer = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32600,
            "message": format!(
                "request too large: {length} bytes, past the limit of {max} bytes for one MCP stdio message; it was not read"
            ),
        },
    });
    let mut line = answer.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// Copy rmcp's output to `output` line by line, with the errors from the
/// reader written between lines.
async fn write_lines<W: AsyncWrite + Unpin>(
    from_rmcp: DuplexStream,
    mut output: W,
    mut errors: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
) {
    let mut from_rmcp = BufReader::new(from_rmcp);
    let mut line = Vec::new();
    let mut errors_open = true;
    loop {
        tokio::select! {
            // Cancel safe: a partial line stays in `line` for the next call.
            read = from_rmcp.read_until(b'\n', &mut line) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line.ends_with(b"\n") => {
                        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                            return;
                        }
                        line.clear();
                    }
                    Ok(_) => {}
                }
            }
            error = errors.recv(), if errors_open => match error {
                Some(answer) => {
                    if output.write_all(&answer).await.is_err() || output.flush().await.is_err() {
                        return;
                    }
                }
                None => errors_open = false,
            },
        }
    }
    if !line.is_empty() {
        let _ = output.write_all(&line).await;
    }
    let _ = output.flush().await;
}
