//! The Codumentor part of the event reference: `register(self, bus)`,
//! handlers `(agent, ctx, payload)` answering control dicts, the in-scope
//! events mapped onto loop points by
//! [`crate::dialects::codumentor::points::points`].

use crate::core::hooks::{ActionKind, HookEvent};
use crate::core::reference::{DialectDoc, OwnEvents};
use crate::dialects::codumentor::{points, IN_SCOPE};

pub static DOC: DialectDoc = DialectDoc {
    name: "codumentor",
    title: "Codumentor",
    calling: "`bus.on(event, handler, priority=100)` inside `register(bus)`; lower priority first, then registration order, after every other dialect's callbacks at a shared loop point. The handler is `handler(agent, ctx, payload)`, `async def` or `def`. The handlers of one event form a chain: each sees the payload the previous one left. Every event understands `None` (no change), `{\"type\": \"continue\", \"patch\": {…}}` (merged into the payload), `{\"type\": \"replace\", \"value\": {…}}` or a dict without `type` (the payload replaced), `{\"type\": \"jsonpatch\", \"ops\": […]}` (RFC 6902, when the `jsonpatch` package is importable), `{\"type\": \"abort\"}` / `{\"type\": \"defer\"}` (this event's chain stops), `{\"type\": \"retry\", \"delay_ms\": N}`. The typed decisions each event honours are under *Answers* below; any other type is ignored. Handlers fail open: one that raises, outlives `--hook-timeout` or answers a known type with wrong fields is reported in `run --json`'s `hook_errors` and skipped.",
    answer,
    methods: &[
        ("on", "Subscribe `handler` to `event`; `event` a non-empty string, `handler` callable, `priority` an `int` (a `TypeError` names which). After `register` returned it raises `RuntimeError`."),
        ("emit", "Run every Codumentor handler of `event` as a chain and return the final payload; failures are logged as warnings."),
    ],
    fields: &[
        ("name", "the scheduled task (`plugin_<name>` for a Felix cron task)"),
        ("plugin", "the plugin that registered the scheduled task"),
        ("every_seconds", "the task's period under `plughost serve`"),
        ("runs", "runs of the task so far in this process"),
        ("failures", "failed runs so far in this process"),
        ("consecutive_failures", "failures in a row, the last run's included"),
        ("sections", "the top-level `config.json` sections a reload changed, sorted"),
        ("config", "the `config.json` the reload read"),
        ("raw", "the inbound message's text"),
        ("session_id", "the session"),
        ("user_id", "always `user` on the command line"),
        ("messages", "the conversation as OpenAI chat messages (`onContextReady`, `onAfterInput`: without the system prompt)"),
        ("tools", "the tools offered to the model: `{name, description, parameters}`"),
        ("model", "`provider:model` of this call"),
        ("params", "the call's parameters (`temperature`, …)"),
        ("error", "the error, as text"),
        ("content_chunks", "the reply's text, in chunks"),
        ("tool_calls", "the reply's tool calls: `{id, name, args}` (`onBeforeSendResponse`: always `[]`)"),
        ("iteration_usage", "token usage the provider reported for this call"),
        ("session_totals", "token usage (plughost reports this call's)"),
        ("tool", "the tool's name"),
        ("args", "the call's arguments"),
        ("tool_call_id", "the model's id of the call"),
        ("result", "the tool's result text"),
        ("ms", "how long the tool took, in milliseconds"),
        ("assistant_text", "the final answer's text"),
        ("final_message", "the stored assistant message"),
        ("reason", "why the turn was aborted"),
        ("context", "`{where, session_id}` of the error"),
        ("conversation_id", "the session (as `session_id`)"),
        ("turn_id", "this turn's id"),
        ("step", "the step (`0`)"),
        ("channel", "`cli`, or `delegate` in a sub-agent"),
        ("plugin_host", "the host facade (also given to `set_plugin_host(host)`)"),
        ("ui_event_emitter", "`await ctx[\"ui_event_emitter\"](event_type, data=None, status=None)`: recorded in `run --json`'s `ui_events`"),
        ("deferred_revision_jobs", "a list plugins may append to; plughost never runs it"),
        ("kind", "`main`, or `subagent` for a delegate"),
        ("tool_registry", "`register_tool(tool)` (a `name` and an `execute(arguments)`), `get_tool(name)`, `list_tools()`: tools added at run time"),
        ("behavior_config", "`model_role` is always `None`"),
    ],
    note,
    recorder: &[
        ("plugin.yaml", "name: recorder\ndialect: codumentor\nentry: codu_recorder:Recorder\n"),
        ("backend/codu_recorder/__init__.py", RECORDER),
    ],
    raiser: &[
        ("plugin.yaml", "name: raiser\ndialect: codumentor\nentry: codu_raiser:Raiser\n"),
        ("backend/codu_raiser/__init__.py", "class Raiser:\n    def __init__(self, config=None, **args):\n        pass\n\n    async def register(self, bus):\n        bus.on('onToolInvokeStart', self.boom)\n\n    async def boom(self, agent, ctx, payload):\n        raise RuntimeError('raiser')\n"),
    ],
    own_events: Some(&OwnEvents {
        register: "register(self, bus)",
        known: IN_SCOPE,
        points: |event| points::points(event).map(|(p, _)| p).collect(),
        answers,
        objects: &[
            ("ctx", "The `ctx` dict", "One dict per turn, shared by every handler of that turn (handlers may add keys); `{}` where the agent is `None`."),
            ("agent", "The `agent` facade", "The agent of the turn (`None` for `onServerReady` and `onSessionEvict`)."),
        ],
    }),
};

/// Codumentor answers are read per event ([`answers`]), not per seed event.
fn answer(_event: HookEvent, _kind: ActionKind) -> &'static str {
    "not used: Codumentor's answers are per event"
}

fn note(_event: HookEvent) -> &'static str {
    ""
}

fn answers(event: &str) -> Option<&'static str> {
    Some(match event {
        "onServerReady" | "onContextReady" | "onToolExecuting" | "onLLMCallEnd" | "onUsageTracked" | "onResponsePersist" | "onTurnAborted" | "onTurnInterrupted" | "onError" | "onSessionEvict" => "a notification: the chain runs, its payload is not fed back.",
        "onInputReceived" => "a changed `raw` replaces the message before commands and the model see it.",
        "onAfterInput" => "`{\"type\": \"short_circuit\", \"assistant_text\": \"…\"}` ends the turn with that text before any model call (`ended_by: short_circuit`).",
        "onPromptAssemble" => "changed `messages` / `tools` are what the model is sent for the rest of the turn, never stored.",
        "onAfterPromptAssemble" => "`{\"type\": \"insert_step\", \"messages\": [{role, content}]}` appends messages to this call and carries them to the turn's later calls (never stored). Payload edits are not fed back.",
        "onLLMCallStart" => "`{\"type\": \"param_patch\", \"model\": \"…\", \"params\": {…}}` changes the model and parameters of this call.",
        "onLLMError" => "`{\"type\": \"llm_retry\"}` makes the failed call once more (once per call).",
        "onAfterLLM" => "`{\"type\": \"short_circuit\", \"assistant_text\": \"…\"}` ends the turn with that text; `{\"type\": \"enqueue_tool\", \"tool\": \"…\", \"args\": {…}}` adds a tool call to the reply.",
        "onToolInvokeStart" => "`{\"type\": \"veto_tool\", \"reason\": \"…\"}`: the call is not run, its result is `[blocked: <reason>]` (outcome `blocked`) and the turn goes on; `{\"type\": \"abort_turn\", \"reason\": \"…\", \"assistant_text\": \"…\"}` ends the turn as completed with that reply, `aborted` set to the reason (`ended_by: aborted`). A changed `args` is what the call runs with (validated again).",
        "onToolInvokeEnd" => "a changed `result` replaces the result; `{\"type\": \"retry_with\", \"patched_args\": {…}, \"backoff_ms\": N}` runs the call once more with those arguments after the wait, its result replacing the first.",
        "onAfterTool" => "`{\"type\": \"short_circuit\", \"assistant_text\": \"…\"}` ends the turn with that text. `{\"type\": \"insert_step\", \"messages\": […]}` places messages after the batch's tool results (never stored); `{\"type\": \"requeue_tool\"}` runs the call once more with the same arguments.",
        "onBeforeSendResponse" => "a changed `assistant_text` replaces the final answer.",
        "onScheduledRunGate" => "`{\"type\": \"continue\", \"patch\": {\"skip\": true, \"skip_reason\": \"…\"}}` skips this run of the scheduled task (counted, the reason logged); the payload is the run descriptor (`name`, `plugin`, `every_seconds`, `runs`, `failures`, `consecutive_failures`).",
        "onConfigReload" => "a notification: `sections` lists the top-level `config.json` sections a reload changed (it fires only when some did), `config` is the new config; the plugins of the new set have been swapped in.",
        "onScheduledRunAutoDisabled" => "a notification: the task named in the run descriptor failed 5 times in a row and is disabled until plughost restarts.",
        "onLLMStream" => "plughost does not stream model deltas to hooks: a subscription is accepted and `plugins doctor` lists it as never firing (`stream_control` is ignored).",
        _ => return None,
    })
}

/// Records the bus's surface, every in-scope event's payload, and the
/// turn's `ctx` and `agent`; written to `record.json` in the plugin's
/// directory (a Codumentor plugin has no tool of its own at load time).
const RECORDER: &str = r#"import inspect, json, pathlib

EVENTS = ['onServerReady', 'onInputReceived', 'onContextReady', 'onAfterInput', 'onPromptAssemble', 'onAfterPromptAssemble', 'onLLMCallStart', 'onLLMStream', 'onLLMCallEnd', 'onUsageTracked', 'onLLMError', 'onAfterLLM', 'onToolInvokeStart', 'onToolExecuting', 'onToolInvokeEnd', 'onAfterTool', 'onBeforeSendResponse', 'onResponsePersist', 'onTurnAborted', 'onTurnInterrupted', 'onError', 'onSessionEvict', 'onScheduledRunGate', 'onScheduledRunAutoDisabled', 'onConfigReload']
RECORD = {"methods": [], "events": {}, "objects": {}}

def save():
    with open(pathlib.Path(__file__).parents[2] / "record.json", "w") as f:
        json.dump(RECORD, f)

def kinds(items):
    return [[k, type(v).__name__] for k, v in items]

class Recorder:
    def __init__(self, config=None, **args):
        pass

    async def register(self, bus):
        for name in dir(bus):
            value = getattr(bus, name)
            if name.startswith("_") or not callable(value):
                continue
            doc = (inspect.getdoc(value) or "").split("\n\n")[0].replace("\n", " ")
            RECORD["methods"].append([name, str(inspect.signature(value)).replace(" -> None", ""), doc])
        for event in EVENTS:
            bus.on(event, self.recorder(event))
        save()

    def recorder(self, event):
        async def handler(agent, ctx, payload):
            RECORD["events"][event] = kinds(payload.items())
            if agent is not None:
                RECORD["objects"]["agent"] = kinds(vars(agent).items())
                RECORD["objects"]["ctx"] = kinds(ctx.items())
            save()
            return None
        return handler
"#;
