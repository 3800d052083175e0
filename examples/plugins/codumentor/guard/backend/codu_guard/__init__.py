"""guard: a Codumentor backend plugin that vets tools and shapes prompts.

plughost builds `Guard(config=None, **args)` from plugin.yaml's `args`
and awaits `register(bus)`. Every handler gets `(agent, ctx, payload)`;
`ctx` is one dict per turn, shared by every handler of that turn.
"""


class Guard:
    def __init__(self, config=None, banned=(), **kwargs):
        self.banned = set(banned)

    async def register(self, bus):
        bus.on("onAfterInput", self.answer_ping, priority=10)
        bus.on("onPromptAssemble", self.be_brief, priority=10)
        bus.on("onToolInvokeStart", self.vet, priority=10)

    async def answer_ping(self, agent, ctx, payload):
        # short_circuit: the turn ends with this text; no model call.
        last = payload["messages"][-1]
        if last.get("role") == "user" and last.get("content") == "ping":
            return {"type": "short_circuit", "assistant_text": "pong"}
        return None

    async def be_brief(self, agent, ctx, payload):
        # continue + patch: the messages of this model call, never stored.
        ctx["prompts"] = ctx.get("prompts", 0) + 1
        note = {"role": "system", "content": "Be brief."}
        return {"type": "continue", "patch": {"messages": payload["messages"] + [note]}}

    async def vet(self, agent, ctx, payload):
        # veto_tool: the call is not run; the model gets [blocked: <reason>].
        if payload["tool"] in self.banned:
            # UI events are collected in `run --json`'s ui_events.
            await ctx["ui_event_emitter"]("tool_vetoed", {"tool": payload["tool"]})
            return {"type": "veto_tool", "reason": f"{payload['tool']} is not allowed here"}
        return None
