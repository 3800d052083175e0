//! The Hermes part of the event reference: `callback(**kwargs)` with the
//! keywords Hermes passes, dict answers.

use crate::core::hooks::{ActionKind, HookEvent};
use crate::core::reference::DialectDoc;

pub static DOC: DialectDoc = DialectDoc {
    name: "hermes",
    title: "Hermes",
    calling: "`ctx.register_hook(\"event_name\", callback)`. The callback is called with keyword arguments only — the fields below; a callback that declares only some of them gets only those, one taking `**kwargs` gets them all. It may be `async def`. Hook names only Hermes fires (`transform_llm_output`, `subagent_start`, …) are accepted and never fire.",
    answer,
    methods: &[
        ("register_tool", "A tool in `toolset`. `schema` is the OpenAI function schema (`{\"name\", \"description\", \"parameters\": <JSON Schema>}`); `handler(args: dict, **kwargs)` (`task_id=` among them) returns a JSON string; a failure becomes `{\"error\": \"Tool execution failed: <Type>: <msg>\"}`. A name another toolset (the built-ins included) already has is refused unless `override=True`. `check_fn` and `requires_env` hide it while unavailable."),
        ("register_hook", "A callback for one event (see *Events* below); names only Hermes fires are accepted and never fire."),
        ("register_command", "A slash command `/name`; `handler(raw_args: str)` returns the reply text (`None`: no reply); it may be `async def`."),
        ("register_skill", "A skill `<plugin>:<name>` read from `path` (a `SKILL.md`), listed by `skills list`."),
        ("dispatch_tool", "Call any registered tool through the host's whole pipeline (its `pre_tool_call` guards included); its JSON string back, a failure as Hermes's error JSON. Needs a running agent or host."),
        ("inject_message", "Queue a user message into the running conversation; the agent adds it at its next model call. Outside a turn (or with `session_key=` naming another session), under `serve` it is a new message in that gateway chat (the chat heard last without `session_key`), answered there. `False` when no agent runs or no conversation takes it."),
        ("register_web_search_provider", "A web search/extract backend (an `agent.web_search_provider.WebSearchProvider`) for the built-in `web_search` and `web_extract` tools; `plugins doctor` lists it under *web*."),
        ("register_cli_command", "A terminal command run as `plughost hermes <name> [ARGS…]` through its own argparse parser (`setup_fn(parser)`, `handler_fn(args)`); `plughost hermes` lists them."),
        ("call_mcp", "Call a tool of one of the host's MCP servers (`mcp_servers` of `config.json`): only servers in `plugins.entries.<plugin>.mcp_allowlist` (else `PermissionError`); `timeout` 1–600 s; Hermes's `{\"ok\", \"result\" | \"error\"}` envelope back. See docs/mcp-client.md."),
        ("register_memory_provider", "The host's memory (an `agent.memory_provider.MemoryProvider`), used only when `memory.provider` names it: initialised per session, its prefetch fenced into each model call, `sync_turn` after the turn, its tools offered. See docs/hermes-providers.md."),
        ("register_middleware", "Middleware `callback` of kind `tool_request`, `tool_execution`, `llm_request` or `llm_execution`, with Hermes's semantics (`LLMExecutionBlocked` stops a model call). See docs/hermes-providers.md."),
        ("register_image_gen_provider", "An image backend (an `agent.image_gen_provider.ImageGenProvider`) for the `image_generate` tool; `image_gen.provider` picks the active one. See docs/hermes-providers.md."),
        ("register_tts_provider", "A text-to-speech backend (an `agent.tts_provider.TTSProvider`) for the `text_to_speech` tool; `tts.provider` picks the active one. See docs/hermes-providers.md."),
        ("register_transcription_provider", "A speech-to-text backend (an `agent.transcription_provider.TranscriptionProvider`) for the `transcribe_audio` tool; `stt.provider` picks the active one. See docs/hermes-providers.md."),
        ("register_browser_provider", "A browser backend (an `agent.browser_provider.BrowserProvider`) whose `create_session` gives a CDP websocket the `browser_*` tools drive; `browser.cloud_provider` picks the active one. See docs/hermes-providers.md."),
        ("register_context_engine", "A context engine (an `agent.context_engine.ContextEngine`) that replaces plughost's `/compact` when `context.engine` names it: its `compress` returns the new transcript; a raising engine falls back to plughost's compaction. See docs/hermes-providers.md."),
    ],
    fields: &[
        ("session_id", "the session key; `None` for a direct `tools call` without `--session`"),
        ("task_id", "the task (sub-agent) the call belongs to, or `None`"),
        ("tool_name", "the tool's registered name; plughost's built-ins under Hermes's names (`exec` is `terminal`, `edit_file` is `patch`, `list_dir` is `search_files`, `delegate` is `delegate_task`)"),
        ("tool_call_id", "the model's id for this call, or `None`"),
        ("args", "the call's arguments (the dict the handler gets); a built-in's in Hermes's shape (`terminal`'s `workdir`, `patch`'s `mode`, `delegate_task`'s `goal`), edits carried back"),
        ("arguments", "the call's arguments (as `args`)"),
        ("result", "the handler's result string"),
        ("duration_ms", "how long the handler took, in milliseconds (`None` for a sub-agent)"),
        ("command", "the shell command `exec` ran"),
        ("output", "`exec`'s output"),
        ("exit_code", "always `None` in plughost (the exit status is in the output)"),
        ("cwd", "always `None` in plughost"),
        ("turn_id", "always `None` in plughost"),
        ("api_request_id", "always `None` in plughost"),
        ("middleware_trace", "always `[]` in plughost"),
        ("model", "`provider:model` of the agent"),
        ("platform", "where the session runs (`cli`)"),
        ("user_message", "the latest user message"),
        ("conversation_history", "the conversation sent to the model (OpenAI chat messages)"),
        ("is_first_turn", "no assistant message yet in this session"),
        ("assistant_response", "the assistant's text of this model call"),
        ("response", "the provider's answer"),
        ("usage", "token usage the provider reported"),
        ("completed", "the turn finished without an error"),
        ("interrupted", "the turn was cancelled (Ctrl-C)"),
        ("parent_session_id", "the parent's session key"),
        ("child_subagent_id", "the sub-agent's session key (`<parent>/sub-N`)"),
        ("child_role", "always `None` in plughost"),
        ("child_summary", "always `None` in plughost"),
        ("child_status", "why the sub-agent stopped"),
        ("tool_call_history", "always `[]` in plughost"),
        ("event", "Hermes's `MessageEvent`: `.text`, `.message_type`, `.message_id`, `.source` (`.platform`, `.chat_id`, `.chat_type`, `.user_id`, `.user_name`, `.thread_id`); platform `api` over `/v1/chat/completions`, `cli` from `run`/`chat`, the platform's own under `serve`'s gateway"),
        ("gateway", "the channel the message came in on (`cli`, `openai`, or the gateway platform's name)"),
        ("session_store", "always `None` in plughost"),
        ("telemetry_schema_version", "`hermes.observer.v1`, as Hermes passes it"),
    ],
    note,
    recorder: &[
        ("plugin.yaml", "name: recorder\nversion: 1.0.0\ndescription: records what every event shows\n"),
        ("__init__.py", RECORDER),
    ],
    raiser: &[
        ("plugin.yaml", "name: raiser\nversion: 1.0.0\n"),
        ("__init__.py", "EVENTS = ['pre_tool_call', 'post_tool_call', 'transform_tool_result', 'transform_terminal_output', 'pre_llm_call', 'post_llm_call', 'pre_api_request', 'post_api_request', 'on_session_start', 'on_session_end', 'on_session_finalize', 'on_session_reset', 'subagent_stop', 'pre_gateway_dispatch']\n\ndef register(ctx):\n    def boom(**kwargs):\n        raise RuntimeError('raiser')\n    for event in EVENTS:\n        ctx.register_hook(event, boom)\n"),
    ],
    own_events: None,
};

fn answer(event: HookEvent, kind: ActionKind) -> &'static str {
    match kind {
        ActionKind::Decide => "a loop-point decision (not offered to this dialect)",
        ActionKind::Block => "`return {\"action\": \"block\", \"message\": \"why\"}` (`\"approve\"` blocks too: plughost has no approval gate)",
        ActionKind::Skip => "`return {\"action\": \"skip\", \"reason\": \"why\"}`",
        ActionKind::Rewrite => "`return {\"action\": \"rewrite\", \"text\": \"new text\"}`",
        ActionKind::Replace if event == HookEvent::ExecOutputRewrite => {
            "`return \"new output\"` (a `str`)"
        }
        ActionKind::Replace => "`return \"new result\"` (a `str`)",
        ActionKind::Inject => "`return \"text\"` or `return {\"context\": \"text\"}`",
    }
}

fn note(event: HookEvent) -> &'static str {
    match event {
        HookEvent::ToolGuard => "`return {\"action\": \"modify\", \"args\": {...}}` merges those arguments into the call's (the handler gets them). A callback that raises or times out blocks the call with Hermes's message.",
        _ => "",
    }
}

/// Records the context's surface and every event's keyword arguments.
const RECORDER: &str = r#"import inspect, json

EVENTS = ['pre_tool_call', 'post_tool_call', 'transform_tool_result', 'transform_terminal_output', 'pre_llm_call', 'post_llm_call', 'pre_api_request', 'post_api_request', 'on_session_start', 'on_session_end', 'on_session_finalize', 'on_session_reset', 'subagent_stop', 'pre_gateway_dispatch']
RECORD = {"methods": [], "attributes": [], "events": {}}

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
    for event in EVENTS:
        ctx.register_hook(event, (lambda e: lambda **kw: RECORD["events"].__setitem__(e, [[k, type(v).__name__] for k, v in kw.items()]))(event))
    ctx.register_tool("recorded", "recorder", {"name": "recorded", "parameters": {"type": "object", "properties": {}}}, lambda args, **kw: json.dumps(RECORD))
"#;
