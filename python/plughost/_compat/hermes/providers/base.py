"""Hermes's ``providers.base`` as plughost serves it: the ``ProviderProfile``
a model-provider plugin registers (the declarative fields plughost reads:
``name``, ``aliases``, ``api_mode``, ``env_vars``, ``base_url``,
``auth_type``, ``default_headers``, ``fallback_models``; the rest are kept
so a plugin written for Hermes constructs its profile unchanged)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Sentinel for "omit temperature entirely", as Hermes has it.
OMIT_TEMPERATURE = object()


@dataclass
class ProviderProfile:
    name: str
    api_mode: str = "chat_completions"
    aliases: tuple = ()
    display_name: str = ""
    description: str = ""
    signup_url: str = ""
    env_vars: tuple = ()
    base_url: str = ""
    models_url: str = ""
    auth_type: str = "api_key"
    supports_health_check: bool = True
    supports_vision: bool = False
    supports_vision_tool_messages: bool = True
    supports_vision_user_messages: bool = False
    supports_prompt_cache_key: bool = False
    fallback_models: tuple = ()
    hostname: str = ""
    default_headers: dict = field(default_factory=dict)
    fixed_temperature: Any = None
    default_max_tokens: int | None = None
    default_aux_model: str = ""

    def get_hostname(self) -> str:
        if self.hostname:
            return self.hostname
        if self.base_url:
            from urllib.parse import urlparse

            return urlparse(self.base_url).hostname or ""
        return ""

    def prepare_messages(self, messages):
        return messages

    def build_extra_body(self, *, session_id=None, **context):
        return {}

    def build_api_kwargs_extras(self, *, reasoning_config=None, **context):
        return {}, {}

    def default_vision_model(self):
        return None

    def get_max_tokens(self, model):
        return self.default_max_tokens

    def fetch_models(self, *, api_key=None, base_url=None, timeout=8.0):
        # plughost does not probe a provider's catalog: the static list stands.
        return None
