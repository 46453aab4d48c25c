"""A session's history kept within the model's window (BEHAVIOUR §10).

Every request is sized by estimate (domain/context.py) to the window less the answer's reserve:
the newest history that fits goes (`room`). A chat turn's first model call also looks at the
history it read: past `compression.threshold` of the window, the older part is summarized by the
model (in parts when it is itself too large for one request) and the session goes on in a child
session that starts from the summary and the recent rows (the store's `compress`, fenced by the
turn's lease); the parent keeps its whole transcript, and its memories are flushed by the usual
flush turn. A turn that needs no compression makes no extra call: the check uses the read it had.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hermes_gateway.domain.context import COMPRESS_COMMAND, cut, limits, message_tokens, request_tokens, text_tokens
from hermes_gateway.domain.sessions import SessionNotFound, TranscriptRow
from hermes_gateway.domain.turn_state import Reply, ToolLoop, Turn, TurnKind, TurnState
from hermes_gateway.errors import Conflict, TransientError
from hermes_gateway.observability import logger
from hermes_gateway.providers.base import ChatMessage, Provider, ToolSpec, Usage
from hermes_gateway.services import lifecycle
from hermes_gateway.services.turn.context import SUMMARY_HEAD, numbered, seen
from hermes_gateway.services.turn.deps import TurnDeps

Read = list[tuple[TranscriptRow, ChatMessage | None]]

SUMMARY_SYSTEM = "You condense conversations into notes for the assistant who continues them."
SUMMARY_PROMPT = (
    "Summarize the conversation above for the assistant who continues it. Keep every fact the user "
    "shared (names, numbers, dates, preferences), the decisions made and the work still open. "
    "Write only the summary."
)
COMPRESSED_REPLY = "Compressed: the earlier conversation is summarized, and this session goes on from the summary."
NOTHING_REPLY = "Nothing to compress yet: the conversation is short enough as it is."
RECENT_SHARE = 0.25  # of the window: the newest rows a compression keeps as they are
MAX_ROUNDS = 3  # summaries of summaries, at most


def window_of(turn: Turn, deps: TurnDeps) -> tuple[int, int]:
    """(the window, the answer's reserve) of the model this turn asks (a session's override too)."""
    chosen = deps.settings.provider
    model = turn.model_override.model if turn.model_override else chosen.model
    return limits(chosen.context_window, chosen.max_output_tokens, model)


def room(turn: Turn, deps: TurnDeps, loop: ToolLoop, system: str, tools: Sequence[ToolSpec] | None) -> int:
    """The estimated tokens the history may take in this request: the window, less the answer's
    reserve, the system prompt, the tools' schemas and this turn's tool exchange."""
    window, reserve = window_of(turn, deps)
    return int((window - reserve) / loop.ratio) - request_tokens(system, loop.messages, tools)


def prepare(state: TurnState, deps: TurnDeps, provider: Provider) -> tuple[TurnState, Read]:
    """The turn's read of its history, after a compression when one is due. A turn's first
    request is calibrated by what the session's last turn found."""
    turn = state.turn
    if state.loop.iterations == 0 and turn.prompt_ratio:
        state = replace(state, loop=replace(state.loop, ratio=turn.prompt_ratio))
    if turn.kind is TurnKind.CRON:
        return state, []
    read = numbered(turn, deps)
    if not _due(state, deps, read):
        return state, read
    moved = compress_turn(state, deps, provider, read)
    return (moved, numbered(moved.turn, deps)) if moved is not None else (state, read)


def requested(turn: Turn) -> bool:
    """The turn of a /compress command: it compresses whatever the threshold, and answers itself."""
    return turn.kind is TurnKind.CHAT and turn.user_text.strip() == COMPRESS_COMMAND


def command_reply(before: TurnState, after: TurnState) -> Reply:
    """What a /compress turn answers: whether the session moved to a compressed child."""
    moved_on = after.turn.session_id != before.turn.session_id
    return Reply(COMPRESSED_REPLY if moved_on else NOTHING_REPLY, None, after.loop.usage)


def last_text(read: Read) -> str:
    messages = seen(read)
    return messages[-1].content if messages else ""


def _due(state: TurnState, deps: TurnDeps, read: Read) -> bool:
    turn, settings = state.turn, deps.settings
    if turn.kind is not TurnKind.CHAT or not state.loop.fresh or deps.edits is None:
        return False
    if requested(turn):
        return True
    if not settings.compression.enabled:
        return False
    size = sum(message_tokens(m) for m in seen(read)) * state.loop.ratio
    return size > settings.compression.threshold * window_of(turn, deps)[0]


def compress_turn(state: TurnState, deps: TurnDeps, provider: Provider, read: Read) -> TurnState | None:
    """Summarize the older part of `read` and move the turn to the child session; None when
    there is nothing older to summarize, the model could not, or the session changed meanwhile."""
    turn, loop = state.turn, state.loop
    assert turn.session_id is not None and deps.edits is not None
    again = _compressed_before(turn, deps, read)
    if again is not None:
        return replace(state, turn=again)
    window, reserve = window_of(turn, deps)
    # /compress keeps only its own message; a compression due by size keeps the recent rows too.
    start = _recent_start(read, turn, 0 if requested(turn) else int(window * RECENT_SHARE / loop.ratio))
    older = seen(read[:start])
    if not older:
        return None
    overhead = text_tokens(SUMMARY_SYSTEM) + message_tokens(ChatMessage("user", SUMMARY_PROMPT)) + 16
    try:
        summary, usage = summarize(provider, older, int((window - reserve) / loop.ratio) - overhead)
    except TransientError as exc:
        logger.warning("compression skipped: the summary failed", extra={"error": type(exc).__name__})
        return None
    kept = [row for row, _ in read[start:]]
    try:
        entry = deps.edits.compress(
            turn.session_id, summary, fence=None, now=deps.now(), keep_last=len(kept), lease_token=turn.lease_token
        )
    except (Conflict, SessionNotFound) as exc:
        logger.warning("compression skipped: the session changed", extra={"error": type(exc).__name__})
        return None
    logger.info("session compressed", extra={"turn_id": turn.turn_id, "summarized": len(older), "kept": len(kept)})
    if turn.session_key:  # the parent's memories, from its whole transcript (BEHAVIOUR §3's flush turn)
        flush = lifecycle.flush_turn(turn.session_id, turn.session_key, turn.source, "compressed", deps.now())
        lifecycle.start(deps.starter, flush)
    return replace(state, turn=moved(turn, entry.session_id, kept), loop=replace(loop, usage=loop.usage + usage))


def _compressed_before(turn: Turn, deps: TurnDeps, read: Read) -> Turn | None:
    """A Respond task run again after its compression was written (an Express retry): the turn
    moved to the child as it was then, without a second summary."""
    assert turn.session_id is not None
    info = deps.catalogue.get_session(turn.session_id)
    if info is None or info.end_reason != "compressed" or not info.continued_in:
        return None
    rows = deps.transcript.window(info.continued_in, upto_seq=None, limit=len(read) + 2)
    copied = [r for r in rows if r.seq > 1 and not (r.role == "assistant" and r.turn_id == turn.turn_id)]
    kept = [row for row, _ in read][-len(copied) :] if copied else []
    return moved(turn, info.continued_in, kept)


def moved(turn: Turn, child_id: str, kept: Sequence[TranscriptRow]) -> Turn:
    """The turn in the child session: the summary is row 1, the kept rows follow, the answer
    takes the seq after them."""
    position = {row.seq: index + 2 for index, row in enumerate(kept)}
    user_seqs = tuple(position[seq] for seq in turn.user_seqs if seq in position)
    return replace(turn, session_id=child_id, user_seqs=user_seqs, reply_seq=len(kept) + 2, hidden=())


def _recent_start(read: Read, turn: Turn, budget: int) -> int:
    """Where the kept part of `read` starts: at a user row, the messages being answered always
    in it, and older ones while they fit in `budget`."""
    answered = min(turn.user_seqs) if turn.user_seqs else (read[-1][0].seq if read else 0)
    start, used = len(read), 0
    for index in range(len(read) - 1, -1, -1):
        row, message = read[index]
        used += message_tokens(message) if message is not None else 0
        if row.seq < answered and used > budget:
            break
        if row.role == "user":
            start = index
    return start


def summarize(provider: Provider, messages: Sequence[ChatMessage], room: int) -> tuple[str, Usage]:
    """A summary of `messages`: one request when they fit in `room`, else a summary of each part
    and then of the summaries (at most MAX_ROUNDS rounds; what is left then is cut to fit)."""
    usage = Usage()
    current = list(messages)
    for _ in range(MAX_ROUNDS):
        texts = []
        for part in _parts(current, room):
            reply = provider.complete(SUMMARY_SYSTEM, _request(part))
            usage += reply.usage
            texts.append(reply.text.strip())
        if len(texts) == 1:
            return texts[0] or "(nothing to summarize)", usage
        current = [ChatMessage("user", f"{SUMMARY_HEAD} (part {i})\n{t}") for i, t in enumerate(texts, start=1)]
    joined = cut(ChatMessage("user", "\n\n".join(m.content for m in current)), room)
    return joined.content, usage


def _parts(messages: Sequence[ChatMessage], room: int) -> list[list[ChatMessage]]:
    """Consecutive messages grouped so that each group's estimate fits in `room` (a message
    larger than that alone is cut)."""
    parts: list[list[ChatMessage]] = [[]]
    used = 0
    for message in messages:
        message = cut(message, room)
        size = message_tokens(message)
        if parts[-1] and used + size > room:
            parts.append([])
            used = 0
        parts[-1].append(message)
        used += size
    return parts


def _request(part: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The messages of one summary request: the part (starting at a user message) and the
    instruction after it."""
    lead = [] if part and part[0].role == "user" else [ChatMessage("user", "(the conversation so far)")]
    messages = [*lead, *part]
    if messages[-1].role == "user":
        last = messages.pop()
        return [*messages, ChatMessage("user", f"{last.content}\n\n{SUMMARY_PROMPT}", images=last.images)]
    return [*messages, ChatMessage("user", SUMMARY_PROMPT)]


__all__ = [
    "SUMMARY_PROMPT",
    "command_reply",
    "compress_turn",
    "last_text",
    "moved",
    "prepare",
    "requested",
    "room",
    "summarize",
    "window_of",
]
