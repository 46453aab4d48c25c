"""A streamed answer (BEHAVIOUR §6, "Streaming"): posted while the model writes it, edited in place.

Where the chat's platform can edit a message it sent and its `streaming` setting is on, a chat
turn's model call streams. Once the answer has been written for `streaming_first_after` seconds
(or FIRST_CHARS characters sooner), it is posted; then it is edited, never more often than the
edit interval (`streaming_edit_interval`; 0: DM_INTERVAL in a DM, GROUP_INTERVAL in a group), to
the text so far. When the model is done the last edit shows the exact first chunk of the answer
at once; what is past the platform's text limit is left to the Deliver state, which
posts it as new messages.

The last edit does not wait for the interval: a wait would be billed twice, as the agent
function's duration and the Express execution's, for every message that streams (0.5 s on
average in a DM, 1.5 s in a group). It is one request past the pace, as a long answer's second
chunk follows its first at once, and a platform that refuses it (a 429) leaves it to the Deliver
state, which waits out the platform's `retry_after` as it does for a send.

The delivery guarantees hold because the streamed message is the reply's first outbox row
(`<turn id>#1`), written once, when it is first posted, as `streaming` with the platform's message
id. A Respond task tried again (or the next model call of a turn that ran tools) reads that row
first, consistently, and edits the same message instead of posting another. The first try of a
turn's first model call reads it eventually consistently (half the price): no earlier try of it
can have posted, only a second run of the same execution, which Express may make, seconds later.
The Deliver state completes it (`sent`; an edit first unless the job says the exact text is
shown), and never posts it again.
/stop ends the stream where it is: the message keeps what was said so far.

Text before a tool call is streamed too: the message shows it while the tools run, and the
answer after them replaces it. The edits are decoration, as the typing indicator is: a failed
edit costs the answer nothing (the Deliver state makes the final one, or posts the answer itself
when nothing was posted). Its one gap: a crash between a post and its outbox row (a few
milliseconds) leaves a message the retry does not know of, and the answer is posted again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hermes_gateway.domain.media import split_media_lines
from hermes_gateway.domain.outbox import STREAM_PARTIAL, STREAM_SHOWN
from hermes_gateway.domain.split import split_message
from hermes_gateway.domain.turn_state import Turn, TurnKind
from hermes_gateway.errors import OutcomeUnknown, PermanentError, RateLimited, TransientError
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.platforms.base import Editor, Sender, Target, editor_of
from hermes_gateway.platforms.catalog import text_limit
from hermes_gateway.providers.base import Provider, streaming_of
from hermes_gateway.services.turn.deps import StreamRows, TurnDeps

FIRST_CHARS = 200  # this much text is posted before `first_after` has passed
DM_INTERVAL = 1.0  # seconds between edits in a DM (Telegram allows about one message a second)
GROUP_INTERVAL = 3.0  # in a group (Telegram: 20 a minute; Discord and Slack are stricter per channel)
STOP_CHECK_SECONDS = 3.0  # how often a stream asks whether /stop came (one eventually consistent read)
RECORD_ATTEMPTS = 3
SILENT = ("[SILENT]", "NO_REPLY")  # as services/turn/respond.py: never posted, even in part
SHOWN = STREAM_SHOWN  # a job's `streamed`: the message shows the exact first chunk
PARTIAL = STREAM_PARTIAL  # the message shows something else: the Deliver state edits it


class StreamStopped(Exception):
    """/stop came while the answer was streaming: the model call ends here."""


@dataclass(frozen=True)
class Pace:
    first_after: float  # seconds of writing before the first post
    interval: float  # seconds between a message's edits


def pace_for(interval: float, first_after: float, chat_type: str) -> Pace:
    if interval <= 0:
        interval = DM_INTERVAL if chat_type == "dm" else GROUP_INTERVAL
    return Pace(first_after, interval)


def row_id(turn_id: str) -> str:
    """The streamed message's outbox row: the first chunk of the reply's delivery (`<turn id>#1`)."""
    return f"{turn_id}#1"


def shown_text(answer: str, limit: int) -> str:
    """What the message shows of the answer: its first chunk, without its MEDIA lines (sent as
    files by the Deliver state) and without a last line that may be one being written."""
    rest, _ = split_media_lines(answer)
    last_line = rest.rsplit("\n", 1)[-1].lstrip()
    if last_line and "MEDIA:".startswith(last_line[:6]):
        rest = rest[: len(rest) - len(rest.rsplit("\n", 1)[-1])]
    if not rest.strip():
        return ""
    return split_message(rest, limit)[0]


@dataclass
class StreamWriter:
    """One model call's stream into the reply's message. `on_text` is the provider's callback."""

    sender: Editor
    poster: Sender
    target: Target
    rows: StreamRows
    turn_id: str
    limit: int
    pace: Pace
    clock: Callable[[], float]  # monotonic: the pace
    sleep: Callable[[float], None]
    wall: Callable[[], float]  # the outbox row's times
    stopped: Callable[[], bool] = lambda: False
    # seconds until the chat's next send slot, one taken when 0 (a paced chat: a Telegram group)
    slot: Callable[[], float] = lambda: 0.0
    message_id: str | None = None
    shown: str | None = None  # the text the message shows (None: not known, after a retry)
    text: str = ""  # the answer so far
    closed: bool = False  # no more posts or edits this call
    edits: int = 0
    started: float = 0.0
    last_at: float = 0.0
    _stop_checked: float = field(default=0.0, repr=False)
    _unrecorded: bool = field(default=False, repr=False)  # posted, its row not yet written

    def open(self, *, earlier_try: bool = True) -> StreamWriter:
        """The reply's message from an earlier try (or model call), when there is one.
        `earlier_try`: one may have posted it (read consistently); False: only a repeated run of
        the execution could have (read eventually consistently)."""
        self.started = self.last_at = self._stop_checked = self.clock()
        entry = self.rows.get(row_id(self.turn_id), consistent=earlier_try)
        if entry is not None and entry.status == "streaming" and entry.platform_message_id:
            self.message_id = entry.platform_message_id
            logger.info("streaming into the message posted before", extra={"turn_id": self.turn_id})
        elif entry is not None:
            self.closed = True  # the reply went out otherwise: the Deliver state knows it
        return self

    def on_text(self, text: str) -> None:
        self.text = text
        if self.closed:
            return
        now = self.clock()
        if now - self._stop_checked >= STOP_CHECK_SECONDS:
            self._stop_checked = now
            if self._stop_asked():
                raise StreamStopped
        if now - self.started < self.pace.first_after and len(text) < FIRST_CHARS:
            return
        if now < self.last_at or (self.message_id is not None and now - self.last_at < self.pace.interval):
            return  # (the text is split only when it may be shown: at most once an interval)
        view = shown_text(text, self.limit)
        if not view or any(s.startswith(view.strip()) for s in SILENT):
            return
        if self.message_id is None:
            self._post(view, now)
        elif view != self.shown and self.edits < self._budget - 1:  # the last edit is kept for the end
            self._edit(view, now)

    def finish(self, answer: str) -> str | None:
        """The model is done: the last edit to the answer's exact first chunk, at once (see the
        module's docstring). The job's `streamed` (SHOWN or PARTIAL), or None when nothing was posted."""
        if self.message_id is None:
            return None
        if self._unrecorded:  # the row's write failed at the first post: once more (raises if it fails)
            self._record(self.message_id, self.shown or "")
        view = shown_text(answer, self.limit)
        if view and view != self.shown and not self.closed and self.edits < self._budget:
            self._edit(view, self.clock())
        metrics.add_metric(name="StreamEdits", unit=MetricUnit.Count, value=self.edits)
        return SHOWN if view and view == self.shown else PARTIAL

    def close(self) -> None:
        """No reply will be delivered (/stop, a silent answer): the message stays as it is."""
        if self.message_id is not None:
            shown = self.shown[:300] if self.shown is not None else None  # what the message keeps showing
            self.rows.mark(row_id(self.turn_id), "sent", self.wall(), platform_message_id=self.message_id, text=shown)

    @property
    def _budget(self) -> int:
        """How many edits the platform allows a message (Feishu 20), this model call's included."""
        allowed = getattr(self.sender, "max_edits", None)
        return allowed if isinstance(allowed, int) else 1_000_000

    def _post(self, view: str, now: float) -> None:
        wait = self.slot()
        if wait > 0:  # the chat's sends are paced: the post waits for its slot, as for a 429
            self.last_at = now + wait
            return
        try:
            message_id = self.poster.send(self.target, view)
        except (TransientError, PermanentError, OutcomeUnknown) as exc:
            # Nothing (known) was posted: the Deliver state posts the answer as it would have.
            self._skip("post", exc, close=not isinstance(exc, RateLimited))
            if isinstance(exc, RateLimited):
                self.last_at = now + exc.retry_after
            return
        if not message_id:
            self.closed = True
            return
        self.message_id, self.shown = message_id, view
        try:
            self._record(message_id, view)
        except TransientError:
            # The message is out: streaming goes on into it, and the row is written once more at
            # the end (a model request tried again must never post a second message).
            self._unrecorded = True
            logger.warning("a streamed message's row could not be written yet", extra={"turn_id": self.turn_id})
        self.last_at = self.clock()
        metrics.add_metric(name="StreamPosted", unit=MetricUnit.Count, value=1)

    def _edit(self, view: str, now: float) -> None:
        assert self.message_id is not None
        try:
            self.sender.edit(self.target, self.message_id, view)
        except RateLimited as exc:
            self._skip("edit", exc, close=False)
            self.last_at = now + exc.retry_after  # and the edit after it waits that long
            return
        except TransientError as exc:
            self._skip("edit", exc, close=False)
            self.last_at = now
            return
        except PermanentError as exc:  # the message was deleted, or cannot be edited any more
            self._skip("edit", exc, close=True)
            return
        self.shown, self.last_at = view, self.clock()
        self.edits += 1

    def _record(self, message_id: str, view: str) -> None:
        """The row, written once: a retried task finds the message here. A throttled write is
        tried again; one that still fails raises (the task is retried, and may post again)."""
        for attempt in range(RECORD_ATTEMPTS):
            try:
                _, wrote = self.rows.record_claimed(
                    row_id(self.turn_id),
                    platform=self.target.platform,
                    chat_id=self.target.chat_id,
                    thread_id=self.target.thread_id,
                    text=view[:300],
                    turn_id=self.turn_id,
                    chunk=1,
                    chunks=1,
                    now=self.wall(),
                    status="streaming",
                    platform_message_id=message_id,
                )
            except TransientError:
                if attempt == RECORD_ATTEMPTS - 1:
                    raise
                self.sleep(0.2 * 2**attempt)
                continue
            if not wrote:
                logger.warning("a streamed message's row was there already", extra={"turn_id": self.turn_id})
            self._unrecorded = False
            return

    def _stop_asked(self) -> bool:
        """Whether /stop came; a read that fails (throttled) says no, and is asked again later."""
        try:
            return self.stopped()
        except TransientError:
            return False

    def _skip(self, what: str, exc: Exception, *, close: bool) -> None:
        # The error's class only: its message may quote the platform's answer.
        logger.info(f"stream {what} skipped", extra={"turn_id": self.turn_id, "error": type(exc).__name__})
        self.closed = self.closed or close


def writer_for(turn: Turn, deps: TurnDeps, provider: Provider, *, earlier_try: bool = True) -> StreamWriter | None:
    """The turn's stream, when it streams: a chat turn answering a message, on a platform whose
    `streaming` is on and whose sender can edit, with a provider that streams. `earlier_try`: an
    earlier try of this task, or an earlier model call of the turn, may have posted its message."""
    target, source = turn.reply_to, turn.source
    if turn.kind is not TurnKind.CHAT or source is None or target is None or not target.chat_id or not turn.session_key:
        return None
    if deps.senders is None or deps.outbox is None or streaming_of(provider) is None:
        return None
    platform = deps.settings.platforms.get(target.platform)
    via = target.context.get("via", "")
    if platform is None or not platform.streaming or via:
        return None
    sender = deps.senders(target.platform, via)
    editor = editor_of(sender)
    if sender is None or editor is None:
        return None
    mode = platform.reply_to_mode
    reply_to = source.message_id if mode in ("first", "all") else None
    chat = Target(target.platform, target.chat_id, target.thread_id, target.context, reply_to=reply_to)
    control, session_key, turn_id = deps.control, str(turn.session_key), turn.turn_id

    def stopped() -> bool:
        # eventually consistent (half a consistent read's price): a /stop seen a check later ends
        # the stream 3 s later, and the answer's conditional write finds it in any case
        return control.state(session_key, consistent=False).stop_turn_id == turn_id

    send_slot = deps.send_slot

    def slot() -> float:
        return send_slot(target.platform, str(target.chat_id)) if send_slot is not None else 0.0

    return StreamWriter(
        sender=editor,
        poster=sender,
        target=chat,
        rows=deps.outbox,
        turn_id=turn.turn_id,
        limit=text_limit(target.platform),
        pace=pace_for(platform.streaming_edit_interval, platform.streaming_first_after, source.chat_type),
        clock=deps.monotonic,
        sleep=deps.sleep,
        wall=deps.now,
        stopped=stopped,
        slot=slot,
    ).open(earlier_try=earlier_try)


__all__ = ["PARTIAL", "SHOWN", "Pace", "StreamStopped", "StreamWriter", "pace_for", "writer_for"]
