//! Counters and latency histograms for `GET /metrics`, in the Prometheus
//! text format (hand-written: a handful of series needs no registry crate).
//! Hook errors are read from the hooks' own counters at scrape time.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use crate::host::Host;

/// Upper bounds (seconds) of the latency buckets.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

#[derive(Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if s <= *bound {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += s;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, bound) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {}",
                self.counts[i]
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Default)]
struct State {
    /// (route, status) → count.
    requests: BTreeMap<(String, u16), u64>,
    request_latency: BTreeMap<String, Histogram>,
    /// (transport, outcome kind) → count.
    tool_calls: BTreeMap<(String, String), u64>,
    tool_latency: BTreeMap<String, Histogram>,
    turns: BTreeMap<String, u64>,
}

/// What the server counts. Cheap to update from many tasks at once.
#[derive(Default)]
pub struct Metrics {
    state: Mutex<State>,
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// One HTTP request answered on `route` with `status` after `took`.
    pub fn request(&self, route: &str, status: u16, took: Duration) {
        let mut s = self.state.lock().expect("metrics");
        *s.requests.entry((route.to_string(), status)).or_default() += 1;
        s.request_latency
            .entry(route.to_string())
            .or_default()
            .observe(took);
    }

    /// One tool call through `via` (`mcp`, `chat`) that ended as `outcome`.
    pub fn tool_call(&self, via: &str, outcome: &str, took: Duration) {
        let mut s = self.state.lock().expect("metrics");
        *s.tool_calls
            .entry((via.to_string(), outcome.to_string()))
            .or_default() += 1;
        s.tool_latency
            .entry(via.to_string())
            .or_default()
            .observe(took);
    }

    /// One agent turn that ended as `result` (`completed`, `failed`, `cancelled`, …).
    pub fn turn(&self, result: &str) {
        let mut s = self.state.lock().expect("metrics");
        *s.turns.entry(result.to_string()).or_default() += 1;
    }

    /// The Prometheus text exposition of everything, hook errors of `host` included.
    pub fn render(&self, host: &Host) -> String {
        let s = self.state.lock().expect("metrics");
        let mut out = String::new();
        out.push_str("# HELP plughost_http_requests_total HTTP requests answered, by route and status.\n# TYPE plughost_http_requests_total counter\n");
        for ((route, status), n) in &s.requests {
            let _ = writeln!(
                out,
                "plughost_http_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                escape(route)
            );
        }
        out.push_str("# HELP plughost_http_request_duration_seconds Time to answer an HTTP request (to the last byte of a stream).\n# TYPE plughost_http_request_duration_seconds histogram\n");
        for (route, h) in &s.request_latency {
            h.render(
                &mut out,
                "plughost_http_request_duration_seconds",
                &format!("route=\"{}\"", escape(route)),
            );
        }
        out.push_str("# HELP plughost_tool_calls_total Tool calls, by where they came from (mcp, chat) and outcome.\n# TYPE plughost_tool_calls_total counter\n");
        for ((via, outcome), n) in &s.tool_calls {
            let _ = writeln!(
                out,
                "plughost_tool_calls_total{{via=\"{via}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        out.push_str("# HELP plughost_tool_call_duration_seconds Time of a tool call through the whole pipeline.\n# TYPE plughost_tool_call_duration_seconds histogram\n");
        for (via, h) in &s.tool_latency {
            h.render(
                &mut out,
                "plughost_tool_call_duration_seconds",
                &format!("via=\"{via}\""),
            );
        }
        out.push_str("# HELP plughost_agent_turns_total Agent turns run for chat completions, by result.\n# TYPE plughost_agent_turns_total counter\n");
        for (result, n) in &s.turns {
            let _ = writeln!(out, "plughost_agent_turns_total{{result=\"{result}\"}} {n}");
        }
        drop(s);
        out.push_str("# HELP plughost_hook_errors_total Hook answers not used (raised, wrong shape, timed out), by plugin and event.\n# TYPE plughost_hook_errors_total counter\n");
        let mut hooks: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
        for (event, entry) in host.registry().hooks().iter() {
            let e = hooks.entry((entry.owner.clone(), event)).or_default();
            e.0 += entry.stats.errors();
            e.1 += entry.stats.calls();
        }
        for ((plugin, event), (errors, _)) in &hooks {
            let _ = writeln!(
                out,
                "plughost_hook_errors_total{{plugin=\"{}\",event=\"{}\"}} {errors}",
                escape(plugin),
                escape(event)
            );
        }
        out.push_str("# HELP plughost_hook_calls_total Hook callbacks run, by plugin and event.\n# TYPE plughost_hook_calls_total counter\n");
        for ((plugin, event), (_, calls)) in &hooks {
            let _ = writeln!(
                out,
                "plughost_hook_calls_total{{plugin=\"{}\",event=\"{}\"}} {calls}",
                escape(plugin),
                escape(event)
            );
        }
        scheduled_tasks(&mut out, host);
        guard_gauge(&mut out, host);
        out
    }
}

/// The scheduled tasks' counters, read from the tasks at scrape time.
fn scheduled_tasks(out: &mut String, host: &Host) {
    let registry = host.registry();
    let tasks = registry.tasks();
    if tasks.is_empty() {
        return;
    }
    out.push_str("# HELP plughost_scheduled_runs_total Runs of plugins' scheduled tasks, by task and result (ok, failed).\n# TYPE plughost_scheduled_runs_total counter\n");
    for t in tasks {
        let (name, plugin) = (escape(&t.name), escape(&t.plugin));
        let (runs, failed) = (t.stats.runs(), t.stats.failures());
        // A run in progress is neither yet.
        let ok = runs.saturating_sub(failed + u64::from(t.stats.running()));
        let _ = writeln!(
            out,
            "plughost_scheduled_runs_total{{task=\"{name}\",plugin=\"{plugin}\",result=\"ok\"}} {ok}"
        );
        let _ = writeln!(
            out,
            "plughost_scheduled_runs_total{{task=\"{name}\",plugin=\"{plugin}\",result=\"failed\"}} {failed}"
        );
    }
    out.push_str("# HELP plughost_scheduled_skipped_total Ticks of a scheduled task skipped because its last run had not finished.\n# TYPE plughost_scheduled_skipped_total counter\n");
    for t in tasks {
        let _ = writeln!(
            out,
            "plughost_scheduled_skipped_total{{task=\"{}\",plugin=\"{}\"}} {}",
            escape(&t.name),
            escape(&t.plugin),
            t.stats.overlaps()
        );
    }
}

/// `plughost_guard_refusing`: 1 for a guard plugin whose isolated worker is
/// disabled by its breaker (every event it guards is refused), else 0.
fn guard_gauge(out: &mut String, host: &Host) {
    out.push_str("# HELP plughost_guard_refusing Guard plugins (fail_closed) refusing what they guard because their breaker is open.\n# TYPE plughost_guard_refusing gauge\n");
    for p in host.plugins().iter().filter(|p| p.loaded) {
        let Some(status) = host.worker_status(&p.key).filter(|s| s.fail_closed) else {
            continue;
        };
        let refusing = u8::from(status.state == crate::isolation::WorkerState::Disabled);
        let _ = writeln!(
            out,
            "plughost_guard_refusing{{plugin=\"{}\"}} {refusing}",
            escape(&p.key)
        );
    }
}
