"""The life of a turn around its execution: its ids, how it starts, how it ends, who goes next.

Turn ids, lease tokens and execution names are derived, never random: a message routed twice
gets the same turn, so its lease and its workflow execution are taken once (an Express start is
not idempotent on AWS; the tasks are). When a turn ends, its lease is released or handed to the
messages that queued behind it in ONE conditional write (`Leases.finish`); the hand-off's
messages join the transcript at the seqs that write allocated and their turn starts at once.

The services import each other one way: router -> commands -> lifecycle -> domain; the turn
engine, the session sweep, cron and the expiry tick use this module, which uses only the domain.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from hermes_gateway.domain.cron import turn_id_for as cron_turn_id
from hermes_gateway.domain.media import keyed
from hermes_gateway.domain.ports import Leases, Transcript, TurnStarter
from hermes_gateway.domain.sessions import ModelOverride, SessionEntry, SessionTally, TranscriptRow
from hermes_gateway.domain.source import SessionSource, sender_of
from hermes_gateway.domain.targets import ReplyTarget
from hermes_gateway.domain.turn_state import CronRun, Step, Turn, TurnKind, TurnNotes, TurnState
from hermes_gateway.domain.turns import NextTurn, QueuedInput
from hermes_gateway.domain.voice import wants_voice
from hermes_gateway.errors import PermanentError
from hermes_gateway.observability import logger


def turn_id_for(session_id: str, event_id: str) -> str:
    """Deterministic and a valid execution name (<= 80 characters of [A-Za-z0-9_-])."""
    return "turn-" + hashlib.sha256(f"{session_id}|{event_id}".encode()).hexdigest()[:40]


def lease_token_for(turn_id: str) -> str:
    return hashlib.sha256(f"lease|{turn_id}".encode()).hexdigest()[:32]


def start(starter: TurnStarter, turn: Turn, name: str | None = None, *, first: Step = Step.MODEL) -> bool:
    """Start the turn's execution (named after the turn, or `name` for a continuation) at `first`:
    the model, or the PrepareMedia task when its messages carry files."""
    return starter.start(name or turn.turn_id, TurnState(turn, next=first).to_json())


def user_row(item: QueuedInput, seq: int, session_id: str) -> TranscriptRow:
    """A queued message as the user's transcript row."""
    return TranscriptRow(
        seq,
        "user",
        item.text,
        item.received_at,
        sender_name=item.source.user_name,
        platform_message_id=item.source.message_id,
        attachments=keyed(item.attachments, item.source.profile, session_id, seq),
        sender=sender_of(item.source),
        quote=item.quote,
        quote_id=item.quote_id,
    )


# -- the turn that answers queued messages ----------------------------------------------------


@dataclass(frozen=True)
class Successor:
    """What the next turn of a session inherits from the one handing it the lease."""

    session_key: str
    session_id: str
    now: float
    answer_together: bool  # turns.busy_followup == "one": one turn answers the whole queue
    model_override: ModelOverride | None = None
    hidden: tuple[tuple[int, int], ...] = ()
    prompt_ratio: float | None = None
    voice: str | None = None  # the chat's /voice mode (domain/voice.py)

    def plan(self, queue: list[QueuedInput], first_seq: int) -> NextTurn:
        taken = queue if self.answer_together else queue[:1]
        last = taken[-1]
        turn_id = turn_id_for(self.session_id, last.event_id)
        user_seqs = tuple(range(first_seq, first_seq + len(taken)))
        turn = Turn(
            turn_id=turn_id,
            kind=TurnKind.CHAT,
            started_at=self.now,
            session_id=self.session_id,
            session_key=self.session_key,
            lease_token=lease_token_for(turn_id),
            event_id=last.event_id,
            source=last.source,
            reply_to=last.reply_to,
            user_seqs=user_seqs,
            reply_seq=first_seq + len(taken),
            user_text="\n\n".join(item.text for item in taken),
            hidden=self.hidden,
            model_override=self.model_override,
            prompt_ratio=self.prompt_ratio,
            voice=self.voice or "",
            speak=wants_voice(self.voice, (a for item in taken for a in item.attachments)),
        )
        return NextTurn(len(taken), turn)


def end_turn(
    leases: Leases,
    transcript: Transcript,
    starter: TurnStarter | None,
    successor: Successor,
    token: str,
    *,
    tally: SessionTally,
    succeeded: bool,
    recovery_failed: bool = False,
    spender: str | None = None,
) -> str:
    """Release the lease (with the turn's totals, added to its user's counters too when
    `spender` names them), or hand it to the next queued message and start that turn: the check
    and the release are one conditional write, so nothing queued is left without a turn.
    Returns released | handed_off | lost."""
    finished = leases.finish(
        successor.session_key,
        successor.session_id,
        token,
        successor.plan,
        successor.now,
        tally=tally,
        succeeded=succeeded,
        recovery_failed=recovery_failed,
        spender=spender,
    )
    if finished.status == "handed_off" and finished.next_turn is not None:
        turn = finished.next_turn
        started = hand_on(transcript, starter, turn, finished.queued)
        if not started and turn.lease_token:
            # The queued message was answered before (an answered message put back in the inbox
            # after the route stopped remembering its event waited in the queue): its execution
            # ran, so its turn is not run again, and the lease it was handed goes on at once.
            logger.info("queued message answered before: its turn is not run again", extra={"turn_id": turn.turn_id})
            end_turn(leases, transcript, starter, successor, turn.lease_token, tally=SessionTally(), succeeded=True)
    return finished.status


def start_after_rows(
    transcript: Transcript,
    starter: TurnStarter | None,
    turn: Turn,
    rows: Sequence[TranscriptRow],
    leased_at: float | None,
) -> bool:
    """The turn's user rows join the transcript (durable even if the start below fails: a repeat
    writes nothing twice), then the turn starts. True when it runs: started now, or by an earlier
    try of the same step. False when its execution ran before: its messages were answered before
    (routed again after the route stopped remembering them), so the rows are taken back and the
    transcript holds each message once.

    An execution the start finds ran before when this call wrote every row: no earlier try got as
    far as the start (the rows go first). When an earlier try wrote them, it may have started the
    execution, which runs or goes on in a continuation; it ran before only if it succeeded before
    the lease was taken, at `leased_at` (None: unknown, so it is taken to run)."""
    assert turn.session_id is not None
    written = [row.seq for row in rows if transcript.put(turn.session_id, row)]
    if starter is None:
        raise PermanentError("no turn starter: the turn's messages cannot be answered")
    # files are fetched and read before the model is asked, by a function sized for them
    first = Step.MEDIA if any(row.attachments for row in rows) else Step.MODEL
    if start(starter, turn, first=first):
        return True
    if len(written) < len(rows) and (leased_at is None or not starter.ended_before(turn.turn_id, leased_at)):
        return True
    for row in rows:
        transcript.withdraw(turn.session_id, row.seq)
    return False


def hand_on(transcript: Transcript, starter: TurnStarter | None, turn: Turn, queued: Sequence[QueuedInput]) -> bool:
    """The queued messages join the transcript and their turn starts (`start_after_rows`)."""
    assert turn.session_id is not None
    rows = [user_row(item, seq, turn.session_id) for item, seq in zip(queued, turn.user_seqs, strict=False)]
    started = start_after_rows(transcript, starter, turn, rows, leased_at=turn.started_at)  # handed on then
    logger.debug("lease handed to the next queued turn", extra={"next": turn.turn_id})
    return started


# -- turns that are not a chat's ---------------------------------------------------------------


def flush_turn(session_id: str, session_key: str, source: SessionSource | None, reason: str, now: float) -> Turn:
    """A memory-only turn over a session that is ending; named after the session, so however
    often it is started (a redelivered message, a retried command), it runs once."""
    return Turn(
        turn_id=f"flush-{session_id}",
        kind=TurnKind.FLUSH,
        started_at=now,
        session_id=session_id,
        session_key=session_key,
        source=source,
        flush_reason=reason,
    )


def cron_turn(run: CronRun, now: float) -> Turn:
    """A scheduled job's run, named after the job and the occurrence (domain.cron.turn_id_for)."""
    return Turn(turn_id=cron_turn_id(run.job_id, run.run_id), kind=TurnKind.CRON, started_at=now, cron=run)


def chat_turn(
    *,
    session_key: str,
    session_id: str,
    event_id: str,
    source: SessionSource,
    reply_to: ReplyTarget,
    user_seq: int,
    reply_seq: int,
    text: str,
    now: float,
    hidden: tuple[tuple[int, int], ...] = (),
    model_override: ModelOverride | None = None,
    notes: TurnNotes | None = None,
    prompt_ratio: float | None = None,
    voice: str | None = None,
    speak: bool = False,
) -> Turn:
    turn_id = turn_id_for(session_id, event_id)
    return Turn(
        turn_id=turn_id,
        kind=TurnKind.CHAT,
        started_at=now,
        session_id=session_id,
        session_key=session_key,
        lease_token=lease_token_for(turn_id),
        event_id=event_id,
        source=source,
        reply_to=reply_to,
        user_seqs=(user_seq,),
        reply_seq=reply_seq,
        user_text=text,
        hidden=hidden,
        model_override=model_override,
        notes=notes or TurnNotes(),
        prompt_ratio=prompt_ratio,
        voice=voice or "",
        speak=speak,
    )


def flush_replaced(starter: TurnStarter, entry: SessionEntry, source: SessionSource | None, now: float) -> bool:
    """BEHAVIOUR §3: the session a reset replaced has its memories flushed. Only when it had a
    prompt (an empty one has nothing to remember, and a flush is a model call)."""
    if not entry.created or not entry.prev_session_id or not entry.reset_had_activity:
        return False
    reason = entry.reset_reason or "reset"
    turn = flush_turn(entry.prev_session_id, entry.session_key, source, reason, now)
    started = start(starter, turn)
    logger.info("memory flush started for the replaced session", extra={"reason": reason, "started": started})
    return True
