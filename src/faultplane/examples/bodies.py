"""Request bodies of the bundled example services: JSON, or a form as Chaos Toolkit's HTTP provider (and
Faultplane's, which sends what Chaos Toolkit sends) posts a mapping without a JSON Content-Type, with each
non-text value JSON-encoded. Both decode to the same mapping, so the examples answer either."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

__all__ = ["decode_body"]


def _value(text: str) -> Any:
    try:
        return json.loads(text)  # 300, true, {"rate": 60}: the form carries them JSON-encoded
    except ValueError:
        return text


def decode_body(raw: bytes, content_type: str | None) -> Any:
    """The body as data; raises ValueError (json.JSONDecodeError) for a body that is neither."""
    if not raw:
        return {}
    if (content_type or "").split(";")[0].strip().lower() == "application/x-www-form-urlencoded":
        return {k: _value(v) for k, v in parse_qsl(raw.decode("utf-8"), keep_blank_values=True)}
    return json.loads(raw)
