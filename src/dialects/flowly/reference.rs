//! The Flowly part of the event reference: `callback(ctx)` with a
//! `flowly.agent.hooks` context object, action objects as answers.

use crate::core::hooks::{ActionKind, HookEvent};
use crate::core::reference::DialectDoc;

pub static DOC: DialectDoc = DialectDoc {
    name: "flowly",
    title: "Flowly",
    calling: "`ctx.register_hook(\"event_name\", callback)`. The callback is called with one argument, the event's context object (from `flowly.agent.hooks`: `ToolHookContext`, `LLMHookContext`, `SessionHookContext`, `SubagentStopContext`, `GatewayDispatchContext`); it may be `async def`. The hooks of one tool call share one context object and one `params` dict: editing `ctx.params` in place in `pre_tool_call` changes what the handler receives. An unknown event name is accepted with a warning and never fires.",
    answer,
    methods: &[
        ("register_tool", "A tool. `schema` is `{\"parameters\": <JSON Schema of the arguments>}` (Flowly's shape; a bare schema with `\"type\"` at the top also works); `handler` gets the arguments as keyword arguments (ones it does not declare are dropped unless it takes `**kwargs`), may be `async def`, and returns the result (`None` → `\"\"`, else `str(result)`). `check_fn()` returning false hides the tool from the model and refuses direct calls (`tools list` marks it unavailable); `requires_env` (variable names) is stored and ignored, as Flowly does; `toolset` is kept and shown by `tools list --json`, one Flowly does not know (`web`, `terminal`, `file`, … `extensions`) becomes `extensions`."),
        ("register_hook", "A callback for one event (see *Events* below)."),
        ("register_command", "A slash command `/name`. `handler(args: str)` gets the text after the name (`\"\"` when none) and returns the reply (`None`: no reply); it may be `async def`. Shown by `/help` and `commands list` with `description` and `args_hint`."),
        ("register_skill", "A skill `<plugin>:<name>`: `path` (relative to the plugin's directory, or absolute) is a Markdown file, read when viewed (`skills view plugin:name`)."),
        ("register_web_search_provider", "A web search/extract backend (a `flowly.agent.tools.web_providers.base.WebSearchProvider` subclass instance), for `kind: backend` plugins; it joins the provider registry only once `register(ctx)` returned without error."),
    ],
    fields: &[
        ("session_id", "the session key (`--session`, `session_id=`); `\"\"` for a direct `tools call` without `--session`"),
        ("task_id", "the task (sub-agent) the call belongs to; `\"\"` in the main loop"),
        ("tool_name", "the tool's registered name"),
        ("params", "the call's arguments (a dict shared by the call's hooks and its handler; edit it in place to change them)"),
        ("tool_call_id", "the model's id for this call (`\"\"` outside the agent loop)"),
        ("result", "the result string (`None` before the handler ran)"),
        ("duration_ms", "how long the handler took, in milliseconds (0.0 before it ran)"),
        ("success", "whether the handler returned (from the call's typed outcome, not from its text); `None` before it ran"),
        ("model", "`provider:model` of the agent"),
        ("messages", "the conversation sent to the model (OpenAI chat messages)"),
        ("tools", "the tool schemas offered to the model this iteration"),
        ("system", "the system prompt"),
        ("user_message", "the latest user message"),
        ("response", "the provider's answer (`None` before it arrived)"),
        ("assistant_message", "the assistant's text of this model call"),
        ("usage", "token usage the provider reported"),
        ("truncated", "the answer was cut off by the output limit"),
        ("interrupted", "the turn was cancelled (Ctrl-C)"),
        ("platform", "where the session runs (`cli`)"),
        ("completed", "the turn finished without an error"),
        ("subagent_id", "the sub-agent's session key (`<parent>/sub-N`)"),
        ("reason", "why the sub-agent stopped"),
        ("event", "the inbound message (`.content`, `.channel`, `.sender_id`, `.session_key`, `.metadata`)"),
        ("gateway", "the channel the message came in on (`cli`)"),
        ("session_store", "always `None` in plughost"),
    ],
    note,
    recorder: &[
        ("plugin.yaml", "name: recorder\nversion: 1.0.0\ndescription: records what every event shows\n"),
        ("__init__.py", RECORDER),
    ],
    raiser: &[
        ("plugin.yaml", "name: raiser\nversion: 1.0.0\n"),
        ("__init__.py", "from flowly.agent.hooks import VALID_EVENTS\n\ndef register(ctx):\n    def boom(c):\n        raise RuntimeError('raiser')\n    for event in VALID_EVENTS:\n        ctx.register_hook(event, boom)\n"),
    ],
    own_events: None,
};

fn answer(event: HookEvent, kind: ActionKind) -> &'static str {
    match kind {
        ActionKind::Decide => "a loop-point decision (not offered to this dialect)",
        ActionKind::Block => "`return BlockAction(\"why\")`",
        ActionKind::Skip => "`return SkipAction(\"why\")`",
        ActionKind::Rewrite => "`return RewriteAction(\"new text\")`",
        ActionKind::Replace if event == HookEvent::ExecOutputRewrite => {
            "`return \"new output\"` (a `str`)"
        }
        ActionKind::Replace => "`return \"new result\"` (a `str`)",
        ActionKind::Inject => "`return \"text\"` or `return {\"context\": \"text\"}`",
    }
}

fn note(event: HookEvent) -> &'static str {
    match event {
        HookEvent::ToolGuard => "Every `pre_tool_call` callback runs even after one blocked (as in Flowly). `BlockAction`, `SkipAction` and `RewriteAction` come from `flowly.agent.hooks`.",
        HookEvent::ToolDone => "`success` is decided on the call's typed outcome: unlike Flowly, which reads `not result.startswith(\"Error\")`, a tool whose real output starts with \"Error\" succeeded.",
        _ => "",
    }
}

/// Records the context's surface and every event's context fields.
const RECORDER: &str = r#"import inspect, json
from flowly.agent.hooks import VALID_EVENTS

RECORD = {"methods": [], "attributes": [], "events": {}}

def _fields(obj):
    return [[k, type(getattr(obj, k)).__name__] for k in obj._fields_spec]

def register(ctx):
    for name in dir(ctx):
        if name.startswith("_"):
            continue
        value = getattr(ctx, name)
        if callable(value):
            try:
                signature = str(inspect.signature(value))
            except (TypeError, ValueError):
                signature = "(...)"
            doc = (inspect.getdoc(value) or "").split("\n\n")[0].replace("\n", " ")
            RECORD["methods"].append([name, signature, doc])
        else:
            RECORD["attributes"].append([name, type(value).__name__])
    for event in sorted(VALID_EVENTS):
        ctx.register_hook(event, (lambda e: lambda c: RECORD["events"].__setitem__(e, _fields(c)))(event))
    ctx.register_tool("recorded", {}, lambda: json.dumps(RECORD))
"#;
