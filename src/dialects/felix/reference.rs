//! The Felix part of the event reference: `register(registry)`, hooks
//! called positionally (`hook(value, ctx)`), eight hook kinds mapped onto
//! loop points by [`crate::dialects::felix::point_of`].

use crate::core::hooks::{ActionKind, HookEvent};
use crate::core::reference::{DialectDoc, OwnEvents};

pub static DOC: DialectDoc = DialectDoc {
    name: "felix",
    title: "Felix",
    calling: "`registry.register_<kind>(hook)`. The hook is called positionally, as Felix calls it: `hook(value, ctx)` (`after_tool(tool_call, result, is_error, ctx)`, startup hooks `hook(app)`); it may be `async def`. Messages are `felix_ai.types.ChatMessage` (`role`, `content`, `tool_calls` of `ToolCall(id, name, args)`, `tool_call_id`, `name`). Several hooks of one kind run in registration order, before any other dialect's at a shared loop point. Hooks fail open: one that raises, outlives `--hook-timeout` or answers a wrong shape is reported in `run --json`'s `hook_errors` (a wrong shape with its own sentence, e.g. `answered {'deny': True} without a 'block' key; treated as allow`) and ignored.",
    answer,
    methods: &[
        ("register_plugin", "An object whose `register_tools(register)` calls `register(name, factory)`; `factory()` returns a `felix.tools.types.Tool` (usually `define_tool(...)`). Its `cron_tasks` (`PluginCronTask(name, run)`) run under `plughost serve` as `plugin_<name>`, `await run()` once a minute as Felix's worker runs them, never twice at once (`plughost cron run plugin_<name>` runs one now); its `routes(app, tools=None)` are mounted by `plughost serve` on one FastAPI app (under plughost's key except its `self_authenticating_mounts`; its `body_limit_bytes` raises the body limit); its `rate_limit_key(request)` names the rate-limit bucket of every request `serve` answers (429 with `Retry-After` past the quota)."),
        ("register_startup_hook", "`hook(app)` when the host starts serving; `app.state` has `settings`, `plugins`, `tools`."),
        ("register_run_finished", "Accepted and logged as never used by a command-line host."),
        ("register_audit_sink", "`factory()` built once; its `record(event)` gets a row in Felix's `record_event` shape for every tool call (`tool_call`, status `ok`/`error`) and every hook block (`policy_deny`, `payload_json.control` = `hook`). A sink that raises is logged; the call is not failed."),
        ("register_usage_sink", "`factory(settings).record(tenant_id=, manifest_id=, model_id=, usage=TokenUsage(...))` for every model call that reported usage."),
        ("register_authenticator", "`register_authenticator(mode, builder)`: the mode `plughost serve --auth MODE` selects; `builder(settings)`'s `authenticate(request)` (a Starlette `Request`) answers an `AuthContext` (accepted) or a Starlette response (sent as the refusal)."),
        ("register_before_turn", "A `before_turn` hook (see *Events*)."),
        ("register_filter_history", "A `filter_history` hook."),
        ("register_before_compact", "A `before_compact` hook."),
        ("register_before_model", "A `before_model` hook."),
        ("register_after_model", "An `after_model` hook."),
        ("register_before_tool", "A `before_tool` hook."),
        ("register_after_tool", "An `after_tool` hook."),
        ("register_compact_failed", "A `compact_failed` hook."),
    ],
    fields: &[
        ("messages", "the messages (a list of `ChatMessage`)"),
        ("ctx.manifest_id", "`main`, or `delegate` in a sub-agent"),
        ("ctx.thread_id", "the session"),
        ("ctx.model_id", "`provider:model` of this call"),
        ("ctx.purpose", "always `turn` in plughost"),
        ("request.messages", "the messages (a list of `ChatMessage`)"),
        ("request.tools", "the names of the tools offered to the model"),
        ("request.kept", "the messages compaction keeps"),
        ("response.message", "the assistant's `ChatMessage`"),
        ("response.stop_reason", "`end_turn`, `tool_use`, `max_tokens` or `unknown`"),
        ("tool_call.id", "the model's id of the call"),
        ("tool_call.name", "the tool's name"),
        ("tool_call.args", "the call's arguments (a dict)"),
        ("result", "the tool's result text (a failure's starts with `[error/<code>]`)"),
        ("is_error", "whether the call failed"),
        ("failure.error", "why compaction failed"),
        ("app.state.settings", "an empty namespace (plughost has no Felix settings)"),
        ("app.state.plugins", "the keys of the loaded plugins"),
        ("app.state.tools", "the names of the registered tools"),
    ],
    note,
    recorder: &[
        ("pyproject.toml", "[project]\nname = \"felix-recorder\"\nversion = \"1.0.0\"\n\n[project.entry-points.\"felix.plugins\"]\nrecorder = \"felix_recorder:register\"\n"),
        ("src/felix_recorder/__init__.py", RECORDER),
    ],
    raiser: &[
        ("pyproject.toml", "[project]\nname = \"felix-raiser\"\nversion = \"1.0.0\"\n\n[project.entry-points.\"felix.plugins\"]\nraiser = \"felix_raiser:register\"\n"),
        ("src/felix_raiser/__init__.py", "def boom(*args):\n    raise RuntimeError('raiser')\n\ndef register(registry):\n    registry.register_before_tool(boom)\n"),
    ],
    own_events: Some(&OwnEvents {
        register: "register(registry)",
        known: &[],
        points: |kind| crate::dialects::felix::point_of(kind).into_iter().collect(),
        answers,
        objects: &[],
    }),
};

/// Felix answers are read per hook kind ([`answers`]), not per seed event.
fn answer(_event: HookEvent, _kind: ActionKind) -> &'static str {
    "not used: Felix's answers are per hook kind"
}

fn note(_event: HookEvent) -> &'static str {
    ""
}

fn answers(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "filter_history" => "a list of `ChatMessage` replaces the history the next hook and the model see for this turn (the stored transcript is untouched); `None` keeps it. Anything else: `answered …, not a list of ChatMessage; the history is kept`.",
        "before_turn" => "a list of `ChatMessage` is appended, and carried to the later model calls of the turn (never stored); `None` appends nothing.",
        "before_model" => "`{\"messages\": [ChatMessage, …]}` is what this one call sends (not carried to later calls); `None` sends it as it was.",
        "after_model" => "`{\"message\": ChatMessage(role=\"assistant\", …)}` replaces the reply the loop acts on and stores (a dropped tool call never runs); a message of another role is refused: `returned a 'user' message, not an assistant's; the reply is kept`.",
        "before_tool" => "`{\"block\": True, \"reason\": \"why\"}` stops the call and the `before_tool` hooks after it: the result is exactly `[error/blocked] why` (`[error/blocked] blocked by before_tool hook` without a reason), outcome `blocked`; `\"terminate\": True` also ends the turn after this call (`ended_by: tool_terminate`). `{\"block\": False}` and `None` let the call through; a dict without `block` is `answered {...} without a 'block' key; treated as allow`.",
        "after_tool" => "every hook sees the tool's own result; the answers are merged, a later hook's keys winning: `\"content\"` (a string or Felix tool content) replaces the result (a failed call keeps its `[error/<code>]` tag in front), `\"terminate\": True` ends the turn after this call.",
        "before_compact" => "`{\"cancel\": True}` keeps the transcript as it is; `{\"summary\": \"…\"}` is used as the summary; the first such answer counts.",
        "compact_failed" => "a notification: the answer is not read.",
        "startup_hook" => "a notification: the answer is not read.",
        _ => return None,
    })
}

/// Records the registry's surface, the hook kinds the compat module knows,
/// and the positional arguments of every hook.
const RECORDER: &str = r#"import inspect, json
import _plughost_felix
from felix.tools.types import define_tool

ARGS = {
    "filter_history": ["messages", "ctx"],
    "before_turn": ["messages", "ctx"],
    "before_model": ["request", "ctx"],
    "after_model": ["response", "ctx"],
    "before_tool": ["tool_call", "ctx"],
    "after_tool": ["tool_call", "result", "is_error", "ctx"],
    "before_compact": ["request", "ctx"],
    "compact_failed": ["failure", "ctx"],
}
RECORD = {"methods": [], "events": {}, "kinds": list(_plughost_felix.HOOK_KINDS) + ["startup_hook"]}

def fields(names, values):
    out = []
    for name, value in zip(names, values):
        if isinstance(value, dict):
            out += [[f"{name}.{k}", type(v).__name__] for k, v in value.items()]
        else:
            out.append([name, type(value).__name__])
    return out

def recorder(kind):
    def hook(*args):
        RECORD["events"][kind] = fields(ARGS.get(kind, ["<not in the recorder's ARGS>"]), args)
    return hook

def startup(app):
    RECORD["events"]["startup_hook"] = [[f"app.state.{k}", type(v).__name__] for k, v in vars(app.state).items()]

class Recorder:
    def register_tools(self, register):
        register("recorded", lambda: define_tool(name="recorded", description="what the recorder saw", handler=lambda a: json.dumps(RECORD)))

def register(registry):
    for name in dir(registry):
        value = getattr(registry, name)
        if name.startswith("_") or not callable(value):
            continue
        doc = (inspect.getdoc(value) or "").split("\n\n")[0].replace("\n", " ")
        RECORD["methods"].append([name, str(inspect.signature(value)).replace(" -> None", ""), doc])
    for kind in _plughost_felix.HOOK_KINDS:
        RECORD["methods"].append(["register_" + kind, "(hook)", ""])
        getattr(registry, "register_" + kind)(recorder(kind))
    registry.register_startup_hook(startup)
    registry.register_plugin(Recorder())
"#;
