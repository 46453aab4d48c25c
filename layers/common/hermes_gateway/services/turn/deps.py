"""What the turn's tasks are given: the ports of one profile's turn (built by `wiring.turn_deps`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from hermes_gateway.domain.events import LifecycleEvents
from hermes_gateway.domain.outbox import OutboxEntry
from hermes_gateway.domain.ports import (
    Catalogue,
    Deliveries,
    Leases,
    MediaStore,
    SessionEdits,
    Transcript,
    TurnControl,
    TurnStarter,
)
from hermes_gateway.domain.sessions import ModelOverride
from hermes_gateway.domain.turn_state import TurnKind
from hermes_gateway.providers.base import Provider
from hermes_gateway.settings import Settings
from hermes_gateway.tools.base import Tool

if TYPE_CHECKING:
    from hermes_gateway.domain.cron import Job
    from hermes_gateway.domain.media import Attachment
    from hermes_gateway.memory.manager import MemoryManager
    from hermes_gateway.platforms.base import Presence, Sender
    from hermes_gateway.platforms.media import Fetched
    from hermes_gateway.providers.stt import Transcriber

FLUSH_WAIT_SECONDS = 12.0  # the Respond task may run 90 s; the wait is a small part of it


class JobRecorder(Protocol):
    """What a cron turn needs of the job store (domain/cron.py `JobStore`)."""

    def get(self, job_id: str) -> Job | None: ...

    def record_run(self, job_id: str, run_id: str, status: str, error: str | None, now: float) -> bool: ...


class StreamRows(Protocol):
    """What a stream needs of the outbox (services.delivery.Outbox, and a read)."""

    def get(self, delivery_id: str, *, consistent: bool = True) -> OutboxEntry | None: ...

    def get_many(self, delivery_ids: list[str]) -> list[OutboxEntry]:
        """The rows of these ids that exist, in one read (a quoted answer's lookup)."""
        ...

    def record_claimed(
        self,
        delivery_id: str,
        *,
        platform: str,
        chat_id: str | None,
        thread_id: str | None,
        text: str,
        turn_id: str | None,
        chunk: int,
        chunks: int,
        now: float,
        status: str = "sending",
        platform_message_id: str | None = None,
    ) -> tuple[OutboxEntry, bool]: ...

    def mark(
        self,
        delivery_id: str,
        status: str,
        now: float,
        *,
        platform_message_id: str | None = None,
        error: str | None = None,
        text: str | None = None,
    ) -> None:
        """Set the chunk's status (and what is given: its message id, the error, the text it shows)."""
        ...


def _no_tools(kind: TurnKind) -> Sequence[Tool]:
    return ()


@dataclass
class TurnDeps:
    settings: Settings
    leases: Leases
    control: TurnControl
    transcript: Transcript
    catalogue: Catalogue  # memory-flush marks, and session_search's reads
    provider: Callable[[], Provider]  # built on first use: only the model step needs the client
    deliveries: Deliveries  # what a task sends itself: approval questions, apologies, pushes
    starter: TurnStarter  # continuations and the turns of queued messages
    now: Callable[[], float]
    events: LifecycleEvents | None = None
    tools: Callable[[TurnKind], Sequence[Tool]] = _no_tools
    # What the Fail task sends for its chat (the answer, or the apology), waited for so it comes
    # before the next turn's reply (None: through `deliveries`).
    replies: Deliveries | None = None
    provider_for: Callable[[ModelOverride], Provider] | None = None  # a session's model override
    tool_ports: dict[str, Any] = field(default_factory=dict)  # directory, jobs, memory
    jobs: JobRecorder | None = None
    home_channels: Callable[[], dict[str, str]] = dict  # platform -> home channel (system prompt)
    memory: Callable[[], MemoryManager] | None = None  # the memory providers, built per task
    sleep: Callable[[float], None] = time.sleep
    # (platform, via) -> what shows the chat a typing indicator while the model works (the
    # platform's sender, when it can); None: no indicators (services/turn/presence.py).
    presence: Callable[[str, str], Presence | None] | None = None
    # The first turn after a reset waits this long at most for the replaced session's flush.
    flush_wait_seconds: float = FLUSH_WAIT_SECONDS
    # Media (services/turn/media.py): the bucket, the platforms' fetchers, speech to text
    media: MediaStore | None = None
    fetch_media: Callable[[Attachment, str, str | None, int], Fetched] | None = None
    transcriber: Callable[[], Transcriber | None] | None = None
    # A long session's compression (services/turn/compaction.py); None: never compressed.
    edits: SessionEdits | None = None
    # A streamed answer (services/turn/stream.py): (platform, via) -> the sender that posts and
    # edits it, and the outbox its message's row is written to; either None: no streaming.
    senders: Callable[[str, str], Sender | None] | None = None
    outbox: StreamRows | None = None
    monotonic: Callable[[], float] = time.monotonic  # a stream's pace
    # (platform, chat id) -> seconds until the chat's next send slot, one taken when 0 (a streamed
    # answer's post in a paced chat, services.delivery.send_slot); None: no chat is paced.
    send_slot: Callable[[str, str], float] | None = None
    # The turn's answer sent from the Respond task itself (services.delivery in this process, the
    # job as the Deliver task would get it -> its outcome), which then finishes the turn too: a
    # turn with nothing else to do is one Lambda task. None: the Deliver and Finish tasks do it.
    deliver: Callable[[Mapping[str, Any]], str] | None = None


__all__ = ["FLUSH_WAIT_SECONDS", "JobRecorder", "StreamRows", "TurnDeps", "TurnStarter"]
