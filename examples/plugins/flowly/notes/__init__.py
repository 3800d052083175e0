"""notes: a Flowly plugin that keeps notes in its host's home.

State lives in files under `get_flowly_home()` (the plughost home the
plugin was loaded by), never in module globals alone: each process loads
the plugin afresh, and several hosts may share one interpreter.
"""

import json
import os
from pathlib import Path

from flowly.agent.hooks import BlockAction
from flowly.profile import get_flowly_home


def _store() -> Path:
    return Path(get_flowly_home()) / "notes" / "notes.json"


def _load() -> list:
    try:
        return json.loads(_store().read_text())
    except FileNotFoundError:
        return []


def _save(notes: list) -> None:
    path = _store()
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(notes))
    os.replace(scratch, path)  # atomic: a reader never sees half a file


def register(ctx):
    async def add_note(text: str, tag: str = "general") -> str:
        notes = _load()
        notes.append({"text": text, "tag": tag})
        _save(notes)
        return f"Noted ({len(notes)} notes)."

    def list_notes(tag: str = "") -> str:
        notes = [n for n in _load() if not tag or n["tag"] == tag]
        return "\n".join(f"- [{n['tag']}] {n['text']}" for n in notes) or "No notes."

    ctx.register_tool(
        "add_note",
        {
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}, "tag": {"type": "string"}},
                "required": ["text"],
            }
        },
        add_note,
        description="Keep a note for the user",
    )
    ctx.register_tool(
        "list_notes",
        {"parameters": {"type": "object", "properties": {"tag": {"type": "string"}}}},
        list_notes,
        description="List the user's notes, optionally of one tag",
    )

    def no_passwords(hook_ctx):
        if hook_ctx.tool_name == "add_note" and "password" in hook_ctx.params.get("text", "").lower():
            return BlockAction("notes must not hold passwords")

    ctx.register_hook("pre_tool_call", no_passwords)

    def remind(hook_ctx):
        count = len(_load())
        if count:
            return {"context": f"The user keeps {count} notes; list_notes shows them."}

    ctx.register_hook("pre_llm_call", remind)

    def notes_command(args: str):
        if args.strip() == "clear":
            _save([])
            return "Cleared."
        return f"{len(_load())} notes."

    ctx.register_command("notes", notes_command, description="Count or clear the notes", args_hint="[clear]")
    ctx.register_skill("howto", "SKILL.md", description="When to keep a note")
