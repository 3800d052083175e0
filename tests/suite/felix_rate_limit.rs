//! Felix plugins' `rate_limit_key(request)` under `plughost serve`: every
//! request but `/healthz` and `/metrics` counts against the bucket the key
//! names (else the client's address), outside authentication; past the
//! quota it answers 429 `{"error": "rate_limited"}` with `Retry-After`.
use crate::common;

use std::process::{Command, Stdio};

/// A plugin in the shape of felix-run/felix's example plugin: a route, and
/// a `rate_limit_key` that buckets by tenant header (`None` without one).
const PLUGIN: &str = r#"
class Limited:
    name = "limited"

    def register_tools(self, register):
        pass

    def routes(self, app, *, tools):
        from fastapi import APIRouter

        router = APIRouter()

        @router.get("/limited/ping")
        async def ping():
            return {"ok": True}

        app.include_router(router)

    def rate_limit_key(self, request):
        tenant = request.headers.get("x-tenant")
        if tenant == "boom":
            raise RuntimeError("the key function broke")
        return f"tenant:{tenant}" if tenant else None

def register(registry):
    registry.register_plugin(Limited())
"#;

struct Killed(std::process::Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn rate_limit_key_buckets_requests_and_answers_429_with_retry_after() {
    common::require_fastapi();
    let home = common::trusted_home(&["limited"]);
    common::felix_tree(home.path(), "limited", PLUGIN);
    let bundled = common::no_bundled();
    let mut child = Command::new(env!("CARGO_BIN_EXE_plughost"))
        .arg("--home")
        .arg(home.path())
        .args([
            "serve",
            "--port",
            "0",
            "--model",
            "scripted",
            "--api-key",
            "k1",
        ])
        .env("PLUGHOST_BUNDLED_DIR", bundled.path())
        .env("PLUGHOST_RATE_LIMIT_PER_MINUTE", "3")
        .env_remove("PLUGHOST_LOG")
        .env_remove("PYTHONPATH")
        .env_remove("PLUGHOST_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = common::serve_url(&mut child);
    let _server = Killed(child);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::new();
    rt.block_on(async {
        let get = |path: &str, tenant: Option<&str>, key: bool| {
            let mut r = client.get(format!("{url}{path}"));
            if let Some(t) = tenant {
                r = r.header("x-tenant", t);
            }
            if key {
                r = r.bearer_auth("k1");
            }
            r
        };
        for i in 0..3 {
            let ok = get("/limited/ping", Some("a"), true).send().await.unwrap();
            assert_eq!(
                ok.status(),
                200,
                "request {i} of tenant a is within the quota"
            );
        }
        let refused = get("/limited/ping", Some("a"), true).send().await.unwrap();
        assert_eq!(refused.status(), 429);
        let after: u64 = refused.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&after), "Retry-After {after}");
        assert_eq!(
            refused.json::<serde_json::Value>().await.unwrap(),
            serde_json::json!({"error": "rate_limited"})
        );
        // plughost's own endpoints count too, in the same bucket.
        let models = get("/v1/models", Some("a"), true).send().await.unwrap();
        assert_eq!(
            models.status(),
            429,
            "the limit covers every endpoint, as Felix's"
        );
        // Another tenant is its own bucket; failed credentials count (the
        // limit is outside authentication).
        assert_eq!(
            get("/limited/ping", Some("b"), false)
                .send()
                .await
                .unwrap()
                .status(),
            401
        );
        assert_eq!(
            get("/limited/ping", Some("b"), true)
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
        assert_eq!(
            get("/limited/ping", Some("b"), true)
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
        assert_eq!(
            get("/limited/ping", Some("b"), true)
                .send()
                .await
                .unwrap()
                .status(),
            429
        );
        // No key (None) and a raising key both fall back to the address.
        for _ in 0..2 {
            assert_eq!(
                get("/limited/ping", None, true)
                    .send()
                    .await
                    .unwrap()
                    .status(),
                200
            );
        }
        assert_eq!(
            get("/limited/ping", Some("boom"), true)
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
        assert_eq!(
            get("/limited/ping", None, true)
                .send()
                .await
                .unwrap()
                .status(),
            429
        );
        // Health and metrics are never limited.
        for _ in 0..5 {
            assert_eq!(
                get("/healthz", Some("a"), false)
                    .send()
                    .await
                    .unwrap()
                    .status(),
                200
            );
        }
    });
}
