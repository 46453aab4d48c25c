"""Lifecycle events (BEHAVIOUR §8): a name and a payload without secrets or message text.

Published as structured log lines for now (`LoggedEvents`: the functions' CloudWatch logs, the
CLI's standard error); issue #7 puts them on the deployment's EventBridge bus behind this port.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol


class LifecycleEvents(Protocol):
    def emit(self, name: str, detail: dict[str, Any]) -> None: ...


class LoggedEvents:
    def __init__(self, log: logging.Logger | Any | None = None) -> None:
        self._log = log

    def emit(self, name: str, detail: dict[str, Any]) -> None:
        from hermes_gateway.observability import logger

        (self._log or logger).info("lifecycle event", extra={"event": name, "detail": detail})
