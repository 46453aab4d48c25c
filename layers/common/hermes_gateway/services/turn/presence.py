"""The typing indicator while a turn's model works: shown as the model call starts, renewed before
the platform lets it fade, and no longer renewed once the call returns or raises.

It is decoration, so it may never cost the answer anything: it runs on a daemon thread (building
the sender, which may read the bot token, included), each request gives up within
PRESENCE_TIMEOUT_SECONDS, every failure is a debug line, and the model's caller waits at most
STOP_WAIT_SECONDS for the thread when the call is over. Only a chat turn answering a message
shows it (a cron run or a memory flush has nobody waiting), and only where the platform's
`typing_indicator` setting is on.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from hermes_gateway.domain.turn_state import Turn, TurnKind
from hermes_gateway.errors import TransientError
from hermes_gateway.observability import logger
from hermes_gateway.platforms.base import Presence, Target
from hermes_gateway.services.turn.deps import TurnDeps

# How long the model's caller waits for the thread to end: a request still in flight (a slow
# platform) is left to finish on its own rather than hold up the answer.
STOP_WAIT_SECONDS = 0.5


@contextmanager
def typing_shown(turn: Turn, deps: TurnDeps) -> Iterator[None]:
    """Show the turn's chat that the bot is at work while the block runs (where it applies)."""
    indicator = _indicator(turn, deps)
    if indicator is None:
        yield
        return
    indicator.start()
    try:
        yield
    finally:
        indicator.stop()


def _indicator(turn: Turn, deps: TurnDeps) -> TypingIndicator | None:
    target, presence = turn.reply_to, deps.presence
    if turn.kind is not TurnKind.CHAT or turn.source is None or target is None or presence is None:
        return None
    platform = deps.settings.platforms.get(target.platform)
    if platform is None or not platform.typing_indicator or not target.chat_id:
        return None
    via = target.context.get("via", "")
    chat = Target(target.platform, target.chat_id, target.thread_id, target.context, reply_to=turn.source.message_id)
    return TypingIndicator(lambda: presence(target.platform, via), chat)


class TypingIndicator:
    """One turn's indicator on its own thread: `start`, then `stop` when the model is done."""

    def __init__(self, presence: Callable[[], Presence | None], target: Target) -> None:
        self._presence = presence
        self._target = target
        self._stopped = threading.Event()
        # in a copy of the turn's context: its log lines carry the turn's keys
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._run,), name="typing-indicator", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(STOP_WAIT_SECONDS)

    def _run(self) -> None:
        try:
            presence = self._presence()
        except Exception as exc:  # noqa: BLE001 - no indicator is all a failure here may cost
            _skipped("no sender", exc)
            return
        if presence is None:
            return
        while not self._stopped.is_set() and self._show(presence):
            if self._stopped.wait(presence.typing_refresh_seconds):
                return

    def _show(self, presence: Presence) -> bool:
        """One indication; whether to renew it (a transient failure is tried again next time)."""
        try:
            return presence.typing(self._target)
        except TransientError as exc:
            _skipped("failed; tried again later", exc)
            return True
        except Exception as exc:  # noqa: BLE001 - the platform refused: ask no more this turn
            _skipped("refused", exc)
            return False


def _skipped(why: str, exc: Exception) -> None:
    # The error's class only: its message may quote the platform's answer, never worth a log line.
    logger.debug("typing indicator skipped", extra={"reason": why, "error": type(exc).__name__})


__all__ = ["STOP_WAIT_SECONDS", "TypingIndicator", "typing_shown"]
