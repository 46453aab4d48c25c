"""What an OpenAI-compatible server said went wrong, fit for an error message: its `error`'s message
(or the body), with the API key taken out (servers echo part of a rejected one) and cut short."""

from __future__ import annotations

import json


def scrubbed(text: str, api_key: str | None) -> str:
    return text.replace(api_key, "<api key>") if api_key else text


def server_message(raw: bytes, api_key: str | None, limit: int = 200) -> str:
    try:
        error = json.loads(raw).get("error")
        message = error.get("message") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        message = None
    text = str(message) if message else raw.decode("utf-8", "replace").strip() or "no details"
    return scrubbed(text, api_key)[:limit]
