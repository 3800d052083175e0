"""``agent.image_gen_provider`` compat (plughost): Hermes's image generation
provider base and helpers.  The active provider (``image_gen.provider`` in
Hermes's config.yaml or plughost's config.json; unset, the first one
registered) backs the ``image_generate`` tool plughost offers the model;
the tool's result is the provider's response dict as JSON, as in Hermes.
"""

from __future__ import annotations

import abc
import base64
import datetime
import json
import logging
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

logger = logging.getLogger(__name__)

VALID_ASPECT_RATIOS: Tuple[str, ...] = ("landscape", "square", "portrait")
DEFAULT_ASPECT_RATIO = "landscape"


class ImageGenProvider(abc.ABC):
    """An image generation backend: implement ``name`` and :meth:`generate`."""

    name: str = ""

    @property
    def display_name(self) -> str:
        return self.name.title()

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
        return {"modalities": ["text"], "max_reference_images": 0}

    def generate(self, prompt: str, aspect_ratio: str = DEFAULT_ASPECT_RATIO, *,
                 image_url: Optional[str] = None,
                 reference_image_urls: Optional[List[str]] = None, **kwargs: Any) -> Dict[str, Any]:
        raise NotImplementedError(f"{self.name} does not implement generate()")


def resolve_aspect_ratio(value: Optional[str]) -> str:
    if not isinstance(value, str):
        return DEFAULT_ASPECT_RATIO
    v = value.strip().lower()
    return v if v in VALID_ASPECT_RATIOS else DEFAULT_ASPECT_RATIO


def normalize_reference_images(value: Any) -> Optional[List[str]]:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        return None
    out = [item.strip() for item in value if isinstance(item, str) and item.strip()]
    return out or None


def _images_cache_dir() -> Path:
    from hermes_constants import get_hermes_home

    path = get_hermes_home() / "cache" / "images"
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_b64_image(b64_data: str, *, prefix: str = "image", extension: str = "png") -> Path:
    raw = base64.b64decode(b64_data)
    ts = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    path = _images_cache_dir() / f"{prefix}_{ts}_{uuid.uuid4().hex[:8]}.{extension}"
    path.write_bytes(raw)
    return path


_URL_IMAGE_TYPES = {"image/png": "png", "image/jpeg": "jpg", "image/jpg": "jpg",
                    "image/webp": "webp", "image/gif": "gif"}


def save_url_image(url: str, *, prefix: str = "image", timeout: float = 60.0,
                   max_bytes: int = 25 * 1024 * 1024) -> Path:
    """Download an image URL into the images cache, as Hermes's helper does;
    raises on a network or HTTP error, a body past ``max_bytes`` or an empty one."""
    import urllib.request

    request = urllib.request.Request(url, headers={"User-Agent": "plughost-hermes-compat"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        content_type = (response.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        raw = response.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise ValueError(f"Image at {url} is larger than {max_bytes} bytes; refusing to cache.")
    if not raw:
        raise ValueError(f"Image at {url} returned 0 bytes; refusing to cache.")
    extension = _URL_IMAGE_TYPES.get(content_type)
    if extension is None:
        tail = url.rsplit("?", 1)[0].rsplit(".", 1)[-1].lower()
        extension = tail if tail in ("png", "jpg", "jpeg", "webp", "gif") else "png"
    ts = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    path = _images_cache_dir() / f"{prefix}_{ts}_{uuid.uuid4().hex[:8]}.{extension}"
    path.write_bytes(raw)
    return path


def success_response(*, image: str, model: str, prompt: str, aspect_ratio: str, provider: str,
                     modality: str = "text", extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    payload: Dict[str, Any] = {"success": True, "image": image, "model": model, "prompt": prompt,
                               "aspect_ratio": aspect_ratio, "modality": modality, "provider": provider}
    for k, v in (extra or {}).items():
        payload.setdefault(k, v)
    return payload


def error_response(*, error: str, error_type: str = "provider_error", provider: str = "",
                   model: str = "", prompt: str = "",
                   aspect_ratio: str = DEFAULT_ASPECT_RATIO) -> Dict[str, Any]:
    return {"success": False, "image": None, "error": error, "error_type": error_type,
            "model": model, "prompt": prompt, "aspect_ratio": aspect_ratio, "provider": provider}


# --- plughost's tool (not part of Hermes's API) ---------------------------

TOOL_SCHEMA = {
    "name": "image_generate",
    "description": (
        "Generate an image from a text prompt, or edit/transform a source image when "
        "image_url (or reference_image_urls) is given. Returns JSON with the image URL or path."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "What the image should show."},
            "aspect_ratio": {"type": "string", "enum": list(VALID_ASPECT_RATIOS),
                             "description": "landscape (16:9), square (1:1) or portrait (9:16).",
                             "default": DEFAULT_ASPECT_RATIO},
            "image_url": {"type": "string", "description": "A source image to edit (URL or path)."},
            "reference_image_urls": {"type": "array", "items": {"type": "string"},
                                     "description": "Further style/composition references."},
        },
        "required": ["prompt"],
    },
}


def _plughost_tool(provider: ImageGenProvider):
    """The ``image_generate`` handler backed by ``provider``."""

    def image_generate(args, **kwargs):
        prompt = str(args.get("prompt") or "")
        aspect = resolve_aspect_ratio(args.get("aspect_ratio"))
        name = getattr(provider, "name", "")
        if not prompt.strip():
            return json.dumps(error_response(error="prompt is required", error_type="invalid_arguments",
                                             provider=name, aspect_ratio=aspect))
        try:
            result = provider.generate(
                prompt, aspect,
                image_url=args.get("image_url") or None,
                reference_image_urls=normalize_reference_images(args.get("reference_image_urls")),
            )
        except Exception as exc:  # the provider's failure is the tool's error result, as in Hermes
            logger.warning("image provider %s failed: %s", name, exc, exc_info=True)
            result = error_response(error=f"{type(exc).__name__}: {exc}", provider=name,
                                    prompt=prompt, aspect_ratio=aspect)
        return json.dumps(result, default=str)

    image_generate.__qualname__ = f"{type(provider).__name__}.generate"
    return image_generate


IMAGE_GENERATE_SCHEMA = TOOL_SCHEMA
