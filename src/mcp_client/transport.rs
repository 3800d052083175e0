//! The streamable-HTTP side of a connection: the rmcp transport's
//! configuration from a server entry's `url` and `headers`.

use std::collections::{BTreeMap, HashMap};

use axum::http::{HeaderName, HeaderValue};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

/// The transport configuration for `url` with `headers` sent on every
/// request. An `Authorization: Bearer …` header becomes rmcp's own
/// authorization setting (rmcp reserves the header); a header that is not
/// a valid HTTP header is refused, naming it.
pub fn http_config(
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<StreamableHttpClientTransportConfig, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
    let mut custom = HashMap::new();
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("authorization") {
            if let Some(token) = value.strip_prefix("Bearer ") {
                config = config.auth_header(token.trim().to_string());
                continue;
            }
        }
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| format!("header '{name}' is not a valid HTTP header name: {e}"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|e| format!("the value of header '{name}' is not valid: {e}"))?;
        custom.insert(header, value);
    }
    Ok(config.custom_headers(custom))
}
