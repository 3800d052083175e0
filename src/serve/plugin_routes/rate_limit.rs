//! Felix plugins' `rate_limit_key(request)` honoured, as Felix's
//! `RateLimitMiddleware` honours it: every request but `/healthz` and
//! `/metrics` counts against a bucket — the first non-empty key a plugin's
//! resolver names, else the client's address — outside authentication, so
//! failed credentials are throttled too. A request past its bucket's quota
//! answers 429 `{"error": "rate_limited"}` with `Retry-After`.
//!
//! The limiter is governor's keyed GCRA: Felix's default quota (120
//! requests a minute per bucket, `PLUGHOST_RATE_LIMIT_PER_MINUTE` to set
//! another) as a burst of that many, refilled evenly over the minute.

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use crate::core::http_app::{AppRequest, RateLimitKey};

/// Felix's `RateLimitConfig.limit` per its `window_seconds` (60).
pub const DEFAULT_PER_MINUTE: u32 = 120;

/// Buckets kept before the idle ones are dropped.
const RETAIN_AFTER: usize = 4096;

/// The keyed limiter and the plugins' key resolvers, in load order.
pub struct RateLimit {
    limiter: DefaultKeyedRateLimiter<String>,
    resolvers: Vec<(String, Arc<dyn RateLimitKey>)>,
    /// Resolvers whose failure was logged (once each, as Felix logs it).
    warned: Mutex<HashSet<String>>,
}

/// The quota per bucket: `PLUGHOST_RATE_LIMIT_PER_MINUTE` or Felix's 120.
pub fn quota_from_env() -> Quota {
    let per_minute = std::env::var("PLUGHOST_RATE_LIMIT_PER_MINUTE")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .and_then(NonZeroU32::new)
        .unwrap_or(NonZeroU32::new(DEFAULT_PER_MINUTE).expect("120 is not zero"));
    Quota::per_minute(per_minute)
}

impl RateLimit {
    /// A limiter of `quota` per bucket, keyed by `resolvers` (plugin, key).
    pub fn new(quota: Quota, resolvers: Vec<(String, Arc<dyn RateLimitKey>)>) -> RateLimit {
        RateLimit {
            limiter: DefaultKeyedRateLimiter::keyed(quota),
            resolvers,
            warned: Mutex::new(HashSet::new()),
        }
    }

    /// Whether `path` is outside the limit (Felix skips health and metrics).
    pub fn exempt(path: &str) -> bool {
        matches!(path, "/healthz" | "/metrics")
    }

    /// The bucket of `request`: the first resolver's non-empty key; one that
    /// raises is logged once and skipped, so the limit stays in force.
    pub fn bucket(&self, request: &AppRequest) -> String {
        for (plugin, resolver) in &self.resolvers {
            match resolver.key(request) {
                Ok(Some(key)) => return format!("plugin:{key}"),
                Ok(None) => {}
                Err(e) => {
                    let first = self
                        .warned
                        .lock()
                        .map(|mut w| w.insert(plugin.clone()))
                        .unwrap_or(false);
                    if first {
                        tracing::warn!(
                            "the rate_limit_key of '{plugin}' failed; falling back (logged once): {}{}",
                            e.message,
                            e.traceback
                                .as_deref()
                                .map(|t| format!("\n{t}"))
                                .unwrap_or_default()
                        );
                    }
                }
            }
        }
        match request.client {
            Some(addr) => format!("client:{}", addr.ip()),
            None => "client:unknown".to_string(),
        }
    }

    /// Count one request against `bucket`: `None` lets it through, `Some`
    /// is the 429 to answer.
    pub fn check(&self, bucket: String) -> Option<Response> {
        if self.limiter.len() > RETAIN_AFTER {
            self.limiter.retain_recent();
        }
        let refused = self.limiter.check_key(&bucket).err()?;
        let wait = refused.wait_time_from(DefaultClock::default().now());
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let mut response = (
            StatusCode::TOO_MANY_REQUESTS,
            axum::Json(serde_json::json!({"error": "rate_limited"})),
        )
            .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
        Some(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::outcome::PluginError;

    struct Header(&'static str);
    impl RateLimitKey for Header {
        fn key(&self, request: &AppRequest) -> Result<Option<String>, PluginError> {
            if self.0.is_empty() {
                return Err(PluginError::native("broken resolver"));
            }
            Ok(request
                .headers
                .iter()
                .find(|(k, _)| k == self.0)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned()))
        }
    }

    fn request(tenant: Option<&str>) -> AppRequest {
        AppRequest {
            headers: tenant
                .map(|t| vec![("x-tenant".to_string(), t.as_bytes().to_vec())])
                .unwrap_or_default(),
            client: Some("127.0.0.1:5000".parse().unwrap()),
            ..AppRequest::default()
        }
    }

    #[test]
    fn buckets_follow_the_first_key_and_fall_back_to_the_address() {
        let limit = RateLimit::new(
            Quota::per_minute(NonZeroU32::new(2).unwrap()),
            vec![
                (
                    "broken".into(),
                    Arc::new(Header("")) as Arc<dyn RateLimitKey>,
                ),
                ("tenant".into(), Arc::new(Header("x-tenant"))),
            ],
        );
        assert_eq!(limit.bucket(&request(Some("a"))), "plugin:a");
        assert_eq!(limit.bucket(&request(None)), "client:127.0.0.1");
        assert!(limit.check("plugin:a".into()).is_none());
        assert!(limit.check("plugin:a".into()).is_none());
        let refused = limit
            .check("plugin:a".into())
            .expect("the third is refused");
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        let after: u64 = refused.headers()[header::RETRY_AFTER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=30).contains(&after), "Retry-After {after}");
        assert!(
            limit.check("plugin:b".into()).is_none(),
            "another bucket is its own"
        );
    }
}
