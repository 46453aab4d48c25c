"""Lifecycle events (BEHAVIOUR §8): a name and a payload without secrets or message text.

Published as structured log lines for now (`LoggedEvents`); issue #7 puts them on the
deployment's EventBridge bus behind the same port.
"""

from __future__ import annotations

from typing import Any, Protocol


class LifecycleEvents(Protocol):
    def emit(self, name: str, detail: dict[str, Any]) -> None: ...


class LoggedEvents:
    def emit(self, name: str, detail: dict[str, Any]) -> None:
        from hermes_gateway.observability import logger

        logger.info("lifecycle event", extra={"event": name, "detail": detail})
