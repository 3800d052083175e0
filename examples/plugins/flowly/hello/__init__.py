from flowly.agent.hooks import BlockAction


def register(ctx):
    def greet(name: str) -> str:
        return f"Hello, {name}!"

    ctx.register_tool(
        "greet",
        {"parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
        greet,
        description="Greet someone",
    )
    ctx.register_hook(
        "pre_tool_call",
        lambda c: BlockAction("not Mallory") if c.params.get("name") == "Mallory" else None,
    )
    ctx.register_command("hello", lambda args: f"hello {args}".strip(), description="Say hello")
    ctx.register_skill("guide", "SKILL.md", description="How to greet")
