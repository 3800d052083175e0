"""``agent.tts_provider`` compat (plughost): Hermes's text-to-speech
provider base.  The active provider (``tts.provider`` in Hermes's
config.yaml or plughost's config.json; unset, the first one registered)
backs the ``text_to_speech`` tool plughost offers the model: the provider
writes the audio to a path under ``$HERMES_HOME/cache/audio/`` and the tool
answers ``{"success": true, "file_path", "media_tag": "MEDIA:<path>",
"provider"}``; a raise becomes ``{"success": false, "error"}``, as Hermes's
dispatcher does.
"""

from __future__ import annotations

import abc
import datetime
import json
import logging
import uuid
from typing import Any, Dict, Iterator, List, Optional

logger = logging.getLogger(__name__)

DEFAULT_OUTPUT_FORMAT = "mp3"
VALID_OUTPUT_FORMATS = frozenset({"mp3", "wav", "ogg", "opus", "flac"})


class TTSProvider(abc.ABC):
    """A text-to-speech backend: implement ``name`` and :meth:`synthesize`."""

    name: str = ""

    @property
    def display_name(self) -> str:
        return self.name.title()

    def is_available(self) -> bool:
        return True

    def list_voices(self) -> List[Dict[str, Any]]:
        return []

    def list_models(self) -> List[Dict[str, Any]]:
        return []

    def get_setup_schema(self) -> Dict[str, Any]:
        return {"name": self.display_name, "badge": "", "tag": "", "env_vars": []}

    def default_model(self) -> Optional[str]:
        models = self.list_models()
        return models[0].get("id") if models else None

    def default_voice(self) -> Optional[str]:
        voices = self.list_voices()
        return voices[0].get("id") if voices else None

    def synthesize(self, text: str, output_path: str, *, voice: Optional[str] = None,
                   model: Optional[str] = None, speed: Optional[float] = None,
                   format: str = DEFAULT_OUTPUT_FORMAT, **extra: Any) -> str:
        raise NotImplementedError(f"{self.name} does not implement synthesize()")

    def stream(self, text: str, *, voice: Optional[str] = None, model: Optional[str] = None,
               format: str = "opus", **extra: Any) -> Iterator[bytes]:
        raise NotImplementedError(f"TTS provider {self.name!r} does not implement streaming synthesis.")

    @property
    def voice_compatible(self) -> bool:
        return False


def resolve_output_format(value: Optional[str]) -> str:
    if not isinstance(value, str):
        return DEFAULT_OUTPUT_FORMAT
    v = value.strip().lower()
    return v if v in VALID_OUTPUT_FORMATS else DEFAULT_OUTPUT_FORMAT


# --- plughost's tool (not part of Hermes's API) ---------------------------

TOOL_SCHEMA = {
    "name": "text_to_speech",
    "description": "Convert text to speech audio. Returns JSON with the audio file's path and a MEDIA: tag to deliver it.",
    "parameters": {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "The text to speak."},
            "output_path": {"type": "string", "description": "Where to write the audio (default: the audio cache)."},
        },
        "required": ["text"],
    },
}


def _plughost_tool(provider: TTSProvider):
    """The ``text_to_speech`` handler backed by ``provider``."""

    def text_to_speech(args, **kwargs):
        text = str(args.get("text") or "")
        name = getattr(provider, "name", "")
        if not text.strip():
            return json.dumps({"success": False, "error": "text is required", "provider": name})
        fmt = DEFAULT_OUTPUT_FORMAT
        path = args.get("output_path")
        if not path:
            from hermes_constants import get_hermes_home

            folder = get_hermes_home() / "cache" / "audio"
            folder.mkdir(parents=True, exist_ok=True)
            ts = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
            path = str(folder / f"tts_{ts}_{uuid.uuid4().hex[:8]}.{fmt}")
        try:
            written = provider.synthesize(text, str(path), voice=provider.default_voice(),
                                          model=provider.default_model(), format=fmt)
        except Exception as exc:
            logger.warning("TTS provider %s failed: %s", name, exc, exc_info=True)
            return json.dumps({"success": False, "error": f"{type(exc).__name__}: {exc}", "provider": name})
        written = str(written or path)
        return json.dumps({"success": True, "file_path": written, "media_tag": f"MEDIA:{written}",
                           "provider": name})

    text_to_speech.__qualname__ = f"{type(provider).__name__}.synthesize"
    return text_to_speech
