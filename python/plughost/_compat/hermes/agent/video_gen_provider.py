"""``agent.video_gen_provider`` compat (plughost): the base class ``VideoGenProvider``
plugins subclass, Hermes's aspect-ratio and resolution constants, and its
response and cache helpers.

Registered instances are accepted and not used by plughost (it offers no
``video_generate`` tool).
"""

from __future__ import annotations

import base64
import datetime
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

#: Hermes's common aspect ratios and resolutions, and the defaults its
#: ``generate`` signature uses.
COMMON_ASPECT_RATIOS: Tuple[str, ...] = ("16:9", "9:16", "1:1", "4:3", "3:4", "3:2", "2:3")
DEFAULT_ASPECT_RATIO = "16:9"
COMMON_RESOLUTIONS: Tuple[str, ...] = ("480p", "540p", "720p", "1080p")
DEFAULT_RESOLUTION = "720p"


class VideoGenProvider:
    """Base of Hermes's VideoGenProvider plugins (plughost: accepted, not used)."""

    name: str = ""

    @property
    def display_name(self) -> str:
        return str(self.name).title()

    def is_available(self) -> bool:
        return True

    def list_models(self) -> List[Dict[str, Any]]:
        return []

    def get_setup_schema(self) -> Dict[str, Any]:
        return {"name": self.display_name, "badge": "", "tag": "", "env_vars": []}

    def default_model(self) -> Optional[str]:
        models = self.list_models()
        return models[0].get("id") if models else None

    def capabilities(self) -> Dict[str, Any]:
        return {
            "modalities": ["text"], "aspect_ratios": list(COMMON_ASPECT_RATIOS),
            "resolutions": list(COMMON_RESOLUTIONS), "max_duration": 10, "min_duration": 1,
            "supports_audio": False, "supports_negative_prompt": False, "max_reference_images": 0,
            "max_reference_videos": 0, "max_reference_audios": 0, "supports_first_frame": False,
            "supports_last_frame": False,
        }

    def generate(self, prompt: str, *, aspect_ratio: str = DEFAULT_ASPECT_RATIO,
                 resolution: str = DEFAULT_RESOLUTION, **kwargs: Any) -> Dict[str, Any]:
        raise NotImplementedError(f"{self.name} does not implement generate()")


def _videos_cache_dir() -> Path:
    from hermes_constants import get_hermes_home

    path = get_hermes_home() / "cache" / "videos"
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_bytes_video(raw: bytes, *, prefix: str = "video", extension: str = "mp4") -> Path:
    """Write video bytes under ``$HERMES_HOME/cache/videos/``."""
    ts = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    path = _videos_cache_dir() / f"{prefix}_{ts}_{uuid.uuid4().hex[:8]}.{extension}"
    path.write_bytes(raw)
    return path


def save_b64_video(b64_data: str, *, prefix: str = "video", extension: str = "mp4") -> Path:
    return save_bytes_video(base64.b64decode(b64_data), prefix=prefix, extension=extension)


def success_response(*, video: str, model: str, prompt: str, modality: str = "text",
                     aspect_ratio: str = "", duration: int = 0, provider: str,
                     extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    payload: Dict[str, Any] = {
        "success": True, "video": video, "model": model, "prompt": prompt, "modality": modality,
        "aspect_ratio": aspect_ratio, "duration": int(duration) if duration else 0, "provider": provider,
    }
    for k, v in (extra or {}).items():
        payload.setdefault(k, v)
    return payload


def error_response(*, error: str, error_type: str = "provider_error", provider: str = "",
                   model: str = "", prompt: str = "", aspect_ratio: str = "") -> Dict[str, Any]:
    return {
        "success": False, "video": None, "error": error, "error_type": error_type, "model": model,
        "prompt": prompt, "aspect_ratio": aspect_ratio, "provider": provider,
    }
