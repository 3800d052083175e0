"""notes: a Hermes plugin that keeps notes in the Hermes home.

State lives in files under `get_hermes_home()`, never in module globals
alone: each process loads the plugin afresh.
"""

import json
import os
from pathlib import Path

from hermes_constants import get_hermes_home

ADD_NOTE = {
    "name": "add_note",
    "description": "Keep a note for the user",
    "parameters": {
        "type": "object",
        "properties": {"text": {"type": "string"}, "tag": {"type": "string"}},
        "required": ["text"],
    },
}


def _store() -> Path:
    return Path(get_hermes_home()) / "notes" / "notes.json"


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
    os.replace(scratch, path)


def register(ctx):
    def add_note(args, **kwargs):
        notes = _load()
        notes.append({"text": args["text"], "tag": args.get("tag", "general")})
        _save(notes)
        return json.dumps({"ok": True, "count": len(notes)})

    ctx.register_tool("add_note", "notes", ADD_NOTE, add_note, description=ADD_NOTE["description"])

    def no_passwords(tool_name, args, **kwargs):
        if tool_name == "add_note" and "password" in args.get("text", "").lower():
            return {"action": "block", "message": "notes must not hold passwords"}

    ctx.register_hook("pre_tool_call", no_passwords)

    def notes_command(raw_args):
        if raw_args.strip() == "clear":
            _save([])
            return "Cleared."
        return f"{len(_load())} notes."

    ctx.register_command("notes", notes_command, description="Count or clear the notes", args_hint="[clear]")
    ctx.register_skill("howto", Path(__file__).parent / "SKILL.md", description="When to keep a note")
