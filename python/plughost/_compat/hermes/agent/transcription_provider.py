"""``agent.transcription_provider`` compat (plughost): Hermes's speech-to-text
provider base.  The active provider (``stt.provider`` in Hermes's
config.yaml or plughost's config.json; unset, the first one registered)
backs the ``transcribe_audio`` tool plughost offers the model; the tool's
result is the provider's envelope ``{"success", "transcript", "provider"
[, "error"]}`` as JSON (a raise becomes the error envelope).
"""

from __future__ import annotations

import abc
import json
import logging
import os
from typing import Any, Dict, List, Optional

logger = logging.getLogger(__name__)


class TranscriptionProvider(abc.ABC):
    """A speech-to-text backend: implement ``name`` and :meth:`transcribe`."""

    name: str = ""

    @property
    def display_name(self) -> str:
        return self.name.title()

    def is_available(self) -> bool:
        return True

    def list_models(self) -> List[Dict[str, Any]]:
        return []

    def default_model(self) -> Optional[str]:
        models = self.list_models()
        return models[0].get("id") if models else None

    def get_setup_schema(self) -> Dict[str, Any]:
        return {"name": self.display_name, "badge": "", "tag": "", "env_vars": []}

    def transcribe(self, file_path: str, *, model: Optional[str] = None,
                   language: Optional[str] = None, **extra: Any) -> Dict[str, Any]:
        raise NotImplementedError(f"{self.name} does not implement transcribe()")


# --- plughost's tool (not part of Hermes's API) ---------------------------

TOOL_SCHEMA = {
    "name": "transcribe_audio",
    "description": "Transcribe an audio file to text. Returns JSON with the transcript.",
    "parameters": {
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "Path of the audio file."},
            "language": {"type": "string", "description": "Optional BCP-47 language hint (en, ja, ...)."},
        },
        "required": ["file_path"],
    },
}


def _plughost_tool(provider: TranscriptionProvider):
    """The ``transcribe_audio`` handler backed by ``provider``."""

    def transcribe_audio(args, **kwargs):
        name = getattr(provider, "name", "")
        path = os.path.abspath(os.path.expanduser(str(args.get("file_path") or "")))
        if not os.path.isfile(path):
            return json.dumps({"success": False, "transcript": "", "provider": name,
                               "error": f"audio file not found: {path}"})
        try:
            result = provider.transcribe(path, model=provider.default_model(),
                                         language=args.get("language") or None)
        except Exception as exc:
            logger.warning("transcription provider %s failed: %s", name, exc, exc_info=True)
            result = {"success": False, "transcript": "", "provider": name,
                      "error": f"{type(exc).__name__}: {exc}"}
        return json.dumps(result, default=str)

    transcribe_audio.__qualname__ = f"{type(provider).__name__}.transcribe"
    return transcribe_audio
