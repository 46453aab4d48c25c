"""Lifecycle events (BEHAVIOUR §8): a name and a payload without secrets or message text.

Published on the deployment's EventBridge bus (adapters.aws.EventBridgeEvents) or, where a
function has no bus, as structured log lines (`LoggedEvents`). `HookedEvents` also hands each
event to the trusted in-process hooks that observe it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class LifecycleEvents(Protocol):
    def emit(self, name: str, detail: dict[str, Any]) -> None: ...


class LoggedEvents:
    def __init__(self, log: logging.Logger | Any | None = None) -> None:
        self._log = log

    def emit(self, name: str, detail: dict[str, Any]) -> None:
        from hermes_gateway.observability import logger

        (self._log or logger).info("lifecycle event", extra={"event": name, "detail": detail})


def flush_events(events: LifecycleEvents) -> None:
    """Wait for events still being published (a function calls this before it returns)."""
    flush = getattr(events, "flush", None)
    if callable(flush):
        flush()


# In-process hooks: trusted Python shipped with the deployment (hermes_gateway.hooks loads them).


@dataclass(frozen=True)
class Hook:
    """A hook: the events it observes (exact names, or a prefix ending in `*` such as `command:*`)
    and its `handle(event, context)`."""

    name: str
    events: tuple[str, ...]
    handle: Callable[[dict[str, Any], dict[str, Any]], Any]

    def observes(self, event: str) -> bool:
        return event_matches(event, self.events)


def event_matches(event: str, patterns: Sequence[str]) -> bool:
    """Whether an event is named by one of `patterns`: a name, or a prefix ending in `*`."""
    return any(event == p or (p.endswith("*") and event.startswith(p[:-1])) for p in patterns)


class HookedEvents:
    """Events that go to `inner` (the bus, or log lines) and then to the in-process hooks that
    observe them. A hook that raises is logged and skipped: it never blocks the message."""

    def __init__(self, inner: LifecycleEvents, hooks: Sequence[Hook], context: Mapping[str, Any]) -> None:
        self.inner = inner
        self.hooks = tuple(hooks)
        self.context = dict(context)

    @property
    def recent(self) -> Any:
        """What the bus adapter kept (local mode shows it); empty for others."""
        return getattr(self.inner, "recent", [])

    def emit(self, name: str, detail: dict[str, Any]) -> None:
        self.inner.emit(name, detail)
        self.run(name, detail)

    def flush(self) -> None:
        flush_events(self.inner)

    def run(self, name: str, detail: dict[str, Any], extra: Mapping[str, Any] | None = None) -> list[Any]:
        """Call each hook observing `name`; return what they answered (None for a failed one)."""
        answers: list[Any] = []
        for hook in self.hooks:
            if not hook.observes(name):
                continue
            event = {"name": name, "detail": dict(detail), **(extra or {})}
            try:
                answers.append(hook.handle(event, dict(self.context, hook=hook.name)))
            except Exception as exc:  # noqa: BLE001 - a failing hook never blocks a message
                _log().warning("hook failed", extra={"hook": hook.name, "event": name, "error": type(exc).__name__})
                answers.append(None)
        return answers


def pre_route(events: LifecycleEvents, session_key: str, detail: dict[str, Any], message: dict[str, Any]) -> str:
    """Publish `message:pre_route` and let in-process hooks switch the session.

    The bus gets `detail` (hashed ids only). In-process hooks, being the deployment's own trusted
    code, also get `message` (the source and text); a hook may answer `{"session_key": key}` to
    route the message to another session of the same namespace (`agent:<profile>:`). The last
    valid answer wins; an invalid one is logged and ignored."""
    if not isinstance(events, HookedEvents):
        events.emit("message:pre_route", detail)
        return session_key
    events.inner.emit("message:pre_route", detail)
    answers = events.run("message:pre_route", detail, {"message": message, "session_key": session_key})
    chosen = session_key
    for answer in answers:
        if isinstance(answer, Mapping) and answer.get("session_key") is not None:
            switched = answer["session_key"]
            if _switchable(session_key, switched):
                chosen = switched
            else:
                _log().warning("hook answered an unusable session key; ignored", extra={"event": "message:pre_route"})
    return chosen


def _switchable(current: str, switched: Any) -> bool:
    from hermes_gateway.domain.session_key import validate_session_key
    from hermes_gateway.errors import InvalidIdentifier

    if not isinstance(switched, str) or not switched or len(switched) > 512:
        return False
    namespace = ":".join(current.split(":", 2)[:2]) + ":"
    try:
        validate_session_key(switched)
    except InvalidIdentifier:
        return False
    return switched.startswith(namespace) and switched != namespace


def _log() -> Any:
    from hermes_gateway.observability import logger

    return logger
