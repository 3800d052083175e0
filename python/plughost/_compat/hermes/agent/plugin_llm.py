"""``agent.plugin_llm`` compat (plughost): the types of Hermes's ``ctx.llm``
facade, for plugins that build structured inputs or check results.
``ctx.llm`` itself is plughost's, backed by the agent's model."""

from _plughost_hermes import (
    PluginLlm,
    PluginLlmCompleteResult,
    PluginLlmImageInput,
    PluginLlmStructuredResult,
    PluginLlmTextInput,
    PluginLlmTrustError,
    PluginLlmUsage,
)

PluginLlmInput = PluginLlmTextInput | PluginLlmImageInput | dict

__all__ = [
    "PluginLlm",
    "PluginLlmTextInput",
    "PluginLlmImageInput",
    "PluginLlmInput",
    "PluginLlmUsage",
    "PluginLlmCompleteResult",
    "PluginLlmStructuredResult",
    "PluginLlmTrustError",
]
