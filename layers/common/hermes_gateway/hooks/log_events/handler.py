"""Example hook: one log line per lifecycle event, with the detail's keys (never its values).

A `message:pre_route` hook may also switch the session by answering `{"session_key": key}`
(a key in the same `agent:<profile>:` namespace); this one only observes, so it answers None.
"""

from __future__ import annotations

from typing import Any

from hermes_gateway.observability import logger


def handle(event: dict[str, Any], context: dict[str, Any]) -> None:
    logger.info(
        "hook saw event",
        extra={"hook": context.get("hook"), "event": event["name"], "keys": sorted(event.get("detail") or {})},
    )
