//! Framing: a 4-byte big-endian length, then that many bytes of JSON.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use super::MAX_FRAME;

/// Encode one frame into `buf` (cleared first; reused across calls so a
/// call costs no allocation once the buffer has grown).
pub fn encode_frame<T: Serialize>(buf: &mut Vec<u8>, message: &T) -> std::io::Result<()> {
    buf.clear();
    buf.extend_from_slice(&[0; 4]);
    serde_json::to_writer(&mut *buf, message).map_err(std::io::Error::other)?;
    let len = buf.len() - 4;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "a message of {len} bytes is larger than the protocol's {MAX_FRAME}"
        )));
    }
    buf[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

/// Write one frame.
pub fn write_frame<W: Write, T: Serialize>(out: &mut W, message: &T) -> std::io::Result<()> {
    let mut frame = Vec::new();
    encode_frame(&mut frame, message)?;
    out.write_all(&frame)?;
    out.flush()
}

/// Read one frame; `Ok(None)` at a clean end of stream.
pub fn read_frame<R: Read, T: for<'de> Deserialize<'de>>(
    input: &mut R,
) -> std::io::Result<Option<T>> {
    read_frame_with(input, &mut Vec::new())
}

/// [`read_frame`] with the body read into `buf` (reused across calls).
pub fn read_frame_with<R: Read, T: for<'de> Deserialize<'de>>(
    input: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "a frame of {len} bytes is larger than the protocol's {MAX_FRAME}: the stream is corrupt"
        )));
    }
    buf.clear();
    buf.resize(len, 0);
    input.read_exact(buf)?;
    serde_json::from_slice(buf)
        .map(Some)
        .map_err(std::io::Error::other)
}

/// The first whole frame in `input` (bytes read so far) and how many bytes
/// it took; `Ok(None)` until a whole one is there. The caller drops what
/// its frames took once it has taken all of them (one move of the rest,
/// not one a frame).
pub fn take_frame<T: for<'de> Deserialize<'de>>(
    input: &[u8],
) -> std::io::Result<Option<(T, usize)>> {
    let Some(head) = input.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(*head) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "a frame of {len} bytes is larger than the protocol's {MAX_FRAME}: the stream is corrupt"
        )));
    }
    if input.len() < 4 + len {
        return Ok(None);
    }
    serde_json::from_slice(&input[4..4 + len])
        .map(|frame| Some((frame, 4 + len)))
        .map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isolation::protocol::{Envelope, Request};

    #[test]
    fn frames_round_trip_and_a_huge_length_is_refused() {
        let mut buf = Vec::new();
        let sent = Envelope {
            id: 7,
            body: Request::Check { tool: "t".into() },
        };
        write_frame(&mut buf, &sent).unwrap();
        let got: Envelope<Request> = read_frame(&mut buf.as_slice()).unwrap().unwrap();
        assert_eq!(got.id, 7);
        assert!(matches!(got.body, Request::Check { tool } if tool == "t"));
        let empty: Option<Envelope<Request>> = read_frame(&mut [].as_slice()).unwrap();
        assert!(empty.is_none());
        let huge = [0xffu8, 0xff, 0xff, 0xff];
        assert!(read_frame::<_, Envelope<Request>>(&mut huge.as_slice()).is_err());
    }

    #[test]
    fn frames_are_taken_whole_from_what_was_read_so_far() {
        let (mut one, mut two) = (Vec::new(), Vec::new());
        let check = |tool: &str| Envelope {
            id: 1,
            body: Request::Check { tool: tool.into() },
        };
        encode_frame(&mut one, &check("a")).unwrap();
        encode_frame(&mut two, &check("b")).unwrap();
        let mut input = one.clone();
        input.extend_from_slice(&two[..5]);
        let (got, took): (Envelope<Request>, usize) = take_frame(&input).unwrap().unwrap();
        assert!(matches!(got.body, Request::Check { tool } if tool == "a"));
        assert_eq!(took, one.len());
        // The second is not whole yet: nothing.
        assert!(take_frame::<Envelope<Request>>(&input[took..])
            .unwrap()
            .is_none());
        input.extend_from_slice(&two[5..]);
        let (got, rest): (Envelope<Request>, usize) = take_frame(&input[took..]).unwrap().unwrap();
        assert!(matches!(got.body, Request::Check { tool } if tool == "b"));
        assert_eq!(took + rest, input.len());
        let huge = [0xffu8, 0xff, 0xff, 0xff];
        assert!(take_frame::<Envelope<Request>>(&huge).is_err());
    }
}
