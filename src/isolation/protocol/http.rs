//! A plugin's HTTP routes across the worker protocol (issue 47 item 3):
//! the request head and body bytes as they travel, and how many response
//! chunks a worker may send ahead of what the client has taken.
//!
//! Bodies are bytes; a frame is JSON, so they cross as base64 (a third
//! larger, and no byte of them is ever read as text).

use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::core::http_app::AppRequest;

/// Response chunks a worker sends before the host says the client took
/// them ([`super::Request::HttpCredit`]): a client that stops reading
/// stalls the route's application at this many chunks, as in-process.
pub const CHUNKS_AHEAD: usize = 8;

/// Bytes, as base64 on the wire.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map(Bytes)
            .map_err(serde::de::Error::custom)
    }
}

/// An [`AppRequest`] without the rest of its body, which follows in
/// [`super::Request::HttpBody`] requests when `streamed`.
#[derive(Debug, Serialize, Deserialize)]
pub struct HttpHead {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, Bytes)>,
    pub body: Bytes,
    pub streamed: bool,
    pub client: Option<std::net::SocketAddr>,
}

impl HttpHead {
    /// The head of `request` (its `rest`, if any, is the caller's to send).
    pub fn of(request: &AppRequest) -> HttpHead {
        HttpHead {
            method: request.method.clone(),
            path: request.path.clone(),
            query: request.query.clone(),
            headers: request
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), Bytes(v.clone())))
                .collect(),
            body: Bytes(request.body.clone()),
            streamed: request.rest.is_some(),
            client: request.client,
        }
    }

    /// The request as the worker's application takes it, `rest` set by
    /// the caller when `streamed`.
    pub fn into_request(self) -> AppRequest {
        AppRequest {
            method: self.method,
            path: self.path,
            query: self.query,
            headers: self.headers.into_iter().map(|(k, v)| (k, v.0)).collect(),
            body: self.body.0,
            rest: None,
            client: self.client,
        }
    }
}

/// One piece of a streamed request body.
#[derive(Debug, Serialize, Deserialize)]
pub enum BodyPiece {
    Chunk(Bytes),
    /// The body ended.
    End,
    /// The body was cut (`too_large`: past the server's limit; else the
    /// client went away, saying why).
    Cut {
        too_large: bool,
        why: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_cross_as_base64_and_come_back_whole() {
        let b = Bytes(vec![0, 255, 10, 13, b'"']);
        let text = serde_json::to_string(&b).unwrap();
        assert_eq!(text, "\"AP8KDSI=\"");
        assert_eq!(serde_json::from_str::<Bytes>(&text).unwrap(), b);
        assert!(serde_json::from_str::<Bytes>("\"not base64!\"").is_err());
    }
}
