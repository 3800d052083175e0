//! A second host in one process (the README's Python example builds two)
//! loads the bundled web providers again: that is the same plugin loading
//! again, replaced without a "registered again" warning; another provider
//! taking a bundled one's name still warns. A process of its own
//! (`alone!`): the web provider registry and the logger are the process's.

use plughost::Host;
use serde_json::json;

/// Records the registry's warnings from the moment it is loaded, and on
/// its tool `take_over`, registers a provider of its own named `brave`.
const WATCHER: &str = r#"
import json, logging

_seen = []

class _Keep(logging.Handler):
    def emit(self, record):
        _seen.append(record.getMessage())

_log = logging.getLogger("flowly.agent.tools.web_providers.registry")
if not any(isinstance(h, _Keep) for h in _log.handlers):
    _log.addHandler(_Keep())

def _take_over():
    from flowly.agent.tools.web_providers.base import WebSearchProvider
    from flowly.agent.tools.web_providers.registry import register_provider

    class MyBrave(WebSearchProvider):
        @property
        def name(self):
            return "brave"

        def is_available(self):
            return True

    register_provider(MyBrave())
    return "done"

def register(ctx):
    ctx.register_tool("warnings", {"type": "object", "properties": {}}, lambda: json.dumps(_seen))
    ctx.register_tool("take_over", {"type": "object", "properties": {}}, _take_over)
"#;

#[test]
fn a_second_host_registers_the_bundled_web_providers_again_without_a_warning() {
    crate::alone!(a_second_host_registers_the_bundled_web_providers_again_without_a_warning);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(plughost::runtime::thread_started)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let home = crate::common::home_with(&["watcher"]);
        crate::common::write_plugin(
            &home.path().join("plugins"),
            "watcher",
            "name: watcher\n",
            &[("__init__.py", WATCHER)],
        );
        let first = Host::builder().home(home.path()).build().unwrap();
        let second = Host::builder().home(home.path()).build().unwrap();
        // The second host's bundled providers registered after the first
        // host's watcher began recording.
        let seen: Vec<String> =
            serde_json::from_str(&first.call_tool("warnings", json!({}), "s").await.text).unwrap();
        assert!(
            seen.iter().all(|w| !w.contains("registered again")),
            "{seen:?}"
        );
        // Another provider taking a bundled one's name is still told.
        assert_eq!(
            second.call_tool("take_over", json!({}), "s").await.text,
            "done"
        );
        let seen: Vec<String> =
            serde_json::from_str(&first.call_tool("warnings", json!({}), "s").await.text).unwrap();
        assert!(
            seen.iter()
                .any(|w| w.contains("web provider 'brave' registered again")),
            "{seen:?}"
        );
    });
}
