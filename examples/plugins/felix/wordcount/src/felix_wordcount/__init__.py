"""wordcount: a Felix plugin with one tool and three agent-loop hooks.

Felix calls `register(registry)` once, synchronously; everything is
registered inside it. Module globals live as long as the process, so
anything that must outlive a turn goes to a file.
"""

import json

from felix.tools.types import define_tool
from felix_ai.types import ChatMessage

COUNT_WORDS = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}


def count_words(args, ctx):
    # `ctx` is Felix's ToolInvocationCtx: thread_id, tool_call_id, manifest_id.
    return f"{len(args['text'].split())} words"


class WordCount:
    """A Felix plugin object: its `register_tools(register)` adds tools."""

    def register_tools(self, register):
        register(
            "count_words",
            lambda: define_tool(
                name="count_words",
                description="Count the words of a text",
                args_schema=COUNT_WORDS,
                handler=count_words,
            ),
        )


def no_passwords(call, ctx):
    # before_tool: {"block": True, "reason": ...} stops the call.
    if "password" in json.dumps(call["args"]).lower():
        return {"block": True, "reason": "no passwords in tool calls"}
    return {"block": False}


def mark(call, result, is_error, ctx):
    # after_tool: {"content": ...} replaces the result the model sees.
    if call["name"] == "count_words" and not is_error:
        return {"content": f"{result} (counted by wordcount)"}
    return None


def one_sentence(messages, ctx):
    # before_turn: the messages returned are appended for this turn only.
    return [ChatMessage(role="user", content="Answer in one sentence.")]


def register(registry):
    registry.register_plugin(WordCount())
    registry.register_before_tool(no_passwords)
    registry.register_after_tool(mark)
    registry.register_before_turn(one_sentence)
