"""In-memory stand-ins for the ports the services call: the idempotent enqueue, the turn starter,
the delivery queue, the outbox, a platform sender and a scripted model provider.

Each keeps the rule of the adapter it replaces, so a test that passes here cannot rely on a
behaviour the real adapter would refuse: the enqueue answers False for an event id it has seen
(like the idempotency record), the starter answers False for an execution name it has started
(like ExecutionAlreadyExists), and the outbox returns the stored entry when an id exists (like
DynamoOutbox's conditional put).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from hermes_gateway.adapters.dynamo_outbox import SEND_CLAIM_SECONDS
from hermes_gateway.domain.outbox import QUEUED, OutboxEntry, QueuedLetter
from hermes_gateway.domain.targets import Channel, channel_key
from hermes_gateway.errors import TransientError
from hermes_gateway.platforms.base import Target
from hermes_gateway.providers.base import ChatMessage, ModelReply, ToolSpec
from hermes_gateway.settings import Settings, load_settings


def make_settings(env: Mapping[str, str] | None = None, config: Mapping[str, Any] | None = None) -> Settings:
    """Settings from an explicit environment only: never the test runner's own os.environ."""
    return load_settings(env=dict(env or {}), config=config or {})


class FakeEnqueue:
    """`EnqueueOnce`: records each envelope sent; a repeated event id is a duplicate (False)."""

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.sent: list[dict[str, Any]] = []
        self.seen: set[str] = set()
        self.calls = 0
        self.fail_with = fail_with

    def __call__(self, envelope: dict[str, Any]) -> bool:
        self.calls += 1
        if self.fail_with is not None:
            raise self.fail_with
        event_id = envelope["event_id"]  # the idempotency key: a missing one is a bug in the caller
        if event_id in self.seen:
            return False
        self.seen.add(event_id)
        self.sent.append(envelope)
        return True


class FakeStarter:
    """`TurnStarter`: one execution per name; a repeated name answers False. `fail_next_start`
    is raised by the next start, once (Step Functions throttling it)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.started: dict[str, dict[str, Any]] = {}
        self.running: set[str] = set()
        self.done: dict[str, float] = {}  # executions that ran to their end and succeeded -> when
        self.fail_next_start: Exception | None = None

    def start(self, name: str, turn: dict[str, Any]) -> bool:
        if self.fail_next_start is not None:
            failure, self.fail_next_start = self.fail_next_start, None
            raise failure
        self.calls.append((name, turn))
        if name in self.started:
            return False
        self.started[name] = turn
        self.running.add(name)
        return True

    def is_running(self, name: str) -> bool:
        return name in self.running

    def finish(self, name: str, *, succeeded: bool = True, at: float = 0.0) -> None:
        self.running.discard(name)
        if succeeded:
            self.done[name] = at

    def ended_before(self, name: str, at: float) -> bool:
        return name in self.done and self.done[name] < at


class FakeDeliveryQueue:
    """`DeliveryQueue`: keeps every body sent, in order."""

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.fail_with = fail_with

    def send(self, body: dict[str, Any]) -> str:
        if self.fail_with is not None:
            raise self.fail_with
        self.bodies.append(body)
        return f"msg-{len(self.bodies)}"


class FakeEvents:
    """`LifecycleEvents`: keeps every (name, detail) emitted."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, Any]]] = []

    def emit(self, name: str, detail: dict[str, Any]) -> None:
        self.emitted.append((name, detail))


class FakeOutbox:
    """The outbox with DynamoOutbox's rules: `record_claimed` writes an entry claimed for sending
    unless the id exists and returns what is stored either way (and whether it wrote); `mark` sets
    the status and counts an attempt. `writes` counts the calls that write, as DynamoDB bills them,
    `reads` the reads (`get`, or `get eventually` for an eventually consistent one)."""

    def __init__(self) -> None:
        self.entries: dict[str, OutboxEntry] = {}
        self.marks: list[tuple[str, str]] = []
        self.writes: list[str] = []
        self.reads: list[str] = []
        self.letters: dict[str, tuple[str, QueuedLetter]] = {}  # delivery id -> (mailbox, letter)

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
        buttons: list[dict[str, str]] | None = None,
        media: list[dict[str, str]] | None = None,
        status: str = "sending",
        platform_message_id: str | None = None,
        mailbox: tuple[str, dict[str, Any]] | None = None,
    ) -> tuple[OutboxEntry, bool]:
        self.writes.append("record_claimed")
        if delivery_id in self.entries:
            return self.entries[delivery_id], False
        if mailbox is not None:
            status = QUEUED
            self.letters[delivery_id] = (mailbox[0], QueuedLetter(delivery_id, mailbox[1], now))
        self.entries[delivery_id] = OutboxEntry(
            delivery_id=delivery_id,
            platform=platform,
            chat_id=chat_id,
            thread_id=thread_id,
            text=text,
            turn_id=turn_id,
            chunk=chunk,
            chunks=chunks,
            status=status,
            attempts=0,
            platform_message_id=platform_message_id,
            error=None,
            created_at=now,
            updated_at=now,
            buttons=buttons,
            media=media,
        )
        return self.entries[delivery_id], True

    def get(self, delivery_id: str, *, consistent: bool = True) -> OutboxEntry | None:
        self.reads.append("get" if consistent else "get eventually")
        return self.entries.get(delivery_id)

    def complete_stream(self, delivery_id: str, now: float, *, text: str) -> OutboxEntry | None:
        self.writes.append("complete_stream")
        entry = self.entries.get(delivery_id)
        if entry is None or entry.status != "streaming":
            return None
        self.entries[delivery_id] = replace(
            entry, status="sent", attempts=entry.attempts + 1, updated_at=now, text=text
        )
        self.marks.append((delivery_id, "sent"))
        return self.entries[delivery_id]

    def get_many(self, delivery_ids: list[str]) -> list[OutboxEntry]:
        self.batch_reads = getattr(self, "batch_reads", 0) + 1
        return [self.entries[d] for d in dict.fromkeys(delivery_ids) if d in self.entries]

    def oldest(self, mailbox: str) -> float | None:
        waiting = [letter.queued_at for name, letter in self.letters.values() if name == mailbox]
        return min(waiting) if waiting else None

    def collect(self, mailbox: str, limit: int) -> list[QueuedLetter]:
        waiting = [letter for name, letter in self.letters.values() if name == mailbox]
        return sorted(waiting, key=lambda letter: letter.queued_at)[:limit]

    def settle(
        self,
        delivery_id: str,
        mailbox: str,
        status: str,
        now: float,
        *,
        platform_message_id: str | None = None,
        error: str | None = None,
    ) -> str:
        self.writes.append("settle")
        entry = self.entries.get(delivery_id)
        if entry is None:
            return "missing"
        if self.letters.get(delivery_id, ("", None))[0] != mailbox or entry.status != QUEUED:
            repeated = entry.status == status and entry.platform_message_id == platform_message_id
            return "already" if repeated else entry.status
        del self.letters[delivery_id]
        self._marked(delivery_id, status, now, platform_message_id, error)
        return "settled"

    def claim(self, delivery_id: str, now: float, reopen: bool = False) -> bool:
        self.writes.append("claim")
        entry = self.entries[delivery_id]
        if entry.status not in ("pending", "failed", *(("dead_lettered",) if reopen else ())):
            return False
        self.entries[delivery_id] = replace(entry, status="sending", updated_at=now)
        return True

    def mark_dead_lettered(self, delivery_id: str, now: float) -> bool:
        self.writes.append("mark_dead_lettered")
        entry = self.entries[delivery_id]
        if entry.status != "failed":
            return False
        self.entries[delivery_id] = replace(entry, status="dead_lettered", updated_at=now)
        self.marks.append((delivery_id, "dead_lettered"))
        return True

    def settle_stale(self, delivery_id: str, now: float, stale_after_seconds: float = 60) -> bool:
        self.writes.append("settle_stale")
        entry = self.entries[delivery_id]
        if entry.status != "sending" or entry.updated_at >= now - stale_after_seconds:
            return False
        self.entries[delivery_id] = replace(entry, status="unknown", updated_at=now)
        return True

    def reclaim(self, delivery_id: str, claimed_at: float, now: float) -> bool:
        self.writes.append("reclaim")
        entry = self.entries[delivery_id]
        if entry.status != "sending" or entry.updated_at != claimed_at:
            return False
        self.entries[delivery_id] = replace(entry, updated_at=now)
        return True

    def fail_sent(self, delivery_id: str, *, platform: str, platform_message_id: str, error: str, now: float) -> str:
        entry = self.entries.get(delivery_id)
        if entry is None:
            return "missing"
        sent_as_this = entry.status == "sent" and entry.platform_message_id == platform_message_id
        abandoned = entry.status == "sending" and entry.updated_at < now - SEND_CLAIM_SECONDS
        left_open = entry.status == "unknown" or abandoned
        if entry.platform != platform or not (sent_as_this or left_open):
            return entry.status
        self.entries[delivery_id] = replace(
            entry, status="failed", updated_at=now, error=error[:500], platform_message_id=platform_message_id
        )
        return "marked"

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
        # Stricter than DynamoDB's update (which would create a partial item): marking an entry that
        # was never recorded is a bug in the caller.
        self.writes.append("mark")
        self._marked(delivery_id, status, now, platform_message_id, error, text)

    def _marked(
        self,
        delivery_id: str,
        status: str,
        now: float,
        platform_message_id: str | None,
        error: str | None,
        text: str | None = None,
    ) -> None:
        entry = self.entries[delivery_id]
        self.entries[delivery_id] = replace(
            entry,
            status=status,
            updated_at=now,
            attempts=entry.attempts + 1,
            platform_message_id=platform_message_id if platform_message_id is not None else entry.platform_message_id,
            error=error[:500] if error is not None else entry.error,
            text=text if text is not None else entry.text,
        )
        self.marks.append((delivery_id, status))


class FakeSender:
    """A platform sender that keeps what it sent and can fail on chosen calls (1-based)."""

    def __init__(self, fail_on: set[int] | None = None, error: Exception | None = None) -> None:
        self.sent: list[tuple[str, str, str | None]] = []
        self.attempts = 0
        self.fail_on = fail_on or set()
        self.error = error or TransientError("platform timed out")

    def send(self, target: Target, text: str) -> str:
        self.attempts += 1
        if self.attempts in self.fail_on:
            raise self.error
        self.sent.append((target.chat_id, text, target.thread_id))
        return str(1000 + len(self.sent))


class ScriptedProvider:
    """A provider that answers with a fixed text (or a function of the messages) and keeps each
    request it was given, so a test can read exactly what reached the model."""

    name = "scripted"

    def __init__(
        self, reply: str | Callable[[list[ChatMessage]], str] = "ok", *, input_tokens: int = 7, output_tokens: int = 3
    ) -> None:
        self.reply = reply
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.requests: list[tuple[str, list[ChatMessage]]] = []

    def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
        self.requests.append((system, list(messages)))
        text = self.reply(messages) if callable(self.reply) else self.reply
        return ModelReply(text=text, model="scripted", input_tokens=self.input_tokens, output_tokens=self.output_tokens)


class FakeDirectory:
    """The directory port in memory: home channels, named chats and gone targets."""

    def __init__(self) -> None:
        self.homes: dict[str, tuple[str, str | None]] = {}
        self.channels: list[Channel] = []
        self.gone: dict[tuple[str, str, str | None], str] = {}

    def home(self, platform: str) -> tuple[str, str | None] | None:
        return self.homes.get(platform)

    def set_home(self, platform: str, chat_id: str, thread_id: str | None, set_by: str | None, now: float) -> None:
        self.homes[platform] = (chat_id, thread_id)

    def remember(self, channel: Channel, now: float) -> None:
        self.channels = [
            c
            for c in self.channels
            if (c.platform, c.chat_id, c.thread_id) != (channel.platform, channel.chat_id, channel.thread_id)
        ] + [channel]

    def channels_named(self, name: str, platform: str | None = None) -> list[Channel]:
        return [
            c
            for c in self.channels
            if channel_key(c.name) == channel_key(name) and (platform is None or c.platform == platform)
        ]

    def mark_gone(self, platform: str, chat_id: str, thread_id: str | None, reason: str, now: float) -> None:
        self.gone[(platform, chat_id, thread_id)] = reason

    def gone_reason(self, platform: str, chat_id: str, thread_id: str | None, now: float) -> str | None:
        return self.gone.get((platform, chat_id, thread_id))

    def clear_gone(self, platform: str, chat_id: str, thread_id: str | None) -> None:
        self.gone.pop((platform, chat_id, thread_id), None)


class FakePacing:
    """`Pacing` with DynamoPacing's rule (the generic cell rate algorithm): a chat's next send time
    per place; a quiet chat's slot is now, a busy chat's is `tolerance` before its next send time,
    taken only when at most `ahead` seconds off. Keeps each reservation asked for."""

    def __init__(self, error: Exception | None = None) -> None:
        self.next_at: dict[str, float] = {}
        self.asked: list[str] = []
        self.error = error

    def reserve(self, place: str, now: float, interval: float, tolerance: float, ahead: float) -> tuple[float, bool]:
        self.asked.append(place)
        if self.error is not None:
            raise self.error
        next_at = self.next_at.get(place)
        if next_at is None or next_at <= now:
            self.next_at[place] = now + interval
            return now, True
        if next_at > now + tolerance + ahead:
            return next_at - tolerance, False
        self.next_at[place] = next_at + interval
        return max(now, next_at - tolerance), True
