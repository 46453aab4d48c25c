"""The agent's context (BEHAVIOUR §10): the system prompt every turn carries, the notes the router
left for it, the tool context, and the history the model sees."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hermes_gateway.domain.context import cut, message_tokens
from hermes_gateway.domain.quotes import with_quote
from hermes_gateway.domain.session_key import is_shared_session
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.turn_state import Turn, TurnKind, TurnState
from hermes_gateway.errors import PermanentError
from hermes_gateway.observability import hash_id, logger
from hermes_gateway.providers.base import ChatMessage
from hermes_gateway.services.turn.deps import TurnDeps
from hermes_gateway.services.turn.media import model_input, understand_rows
from hermes_gateway.services.turn.quotes import quotes
from hermes_gateway.services.turn.reach import turn_reach
from hermes_gateway.settings import Settings
from hermes_gateway.tools.base import ToolContext, user_hash

if TYPE_CHECKING:
    from hermes_gateway.memory.manager import MemoryManager

FLUSH_PROMPT = (
    "This conversation is about to end. Save anything worth remembering about the user with the "
    "memory tool (facts, preferences, ongoing work); skip what is already saved. Then reply NO_REPLY."
)
# Platforms whose ids are personal data: the model gets stable hashed handles (BEHAVIOUR §10).
_HASHED_ID_PLATFORMS = ("telegram", "whatsapp", "signal", "bluebubbles", "email")
MIN_ROOM = 64  # the message being answered keeps at least this many tokens, however full the rest


def _shown_id(platform: str, value: str | None) -> str:
    if value is None:
        return "-"
    return f"{platform}:{hash_id(value)}" if platform in _HASHED_ID_PLATFORMS else value


def system_prompt(
    source: SessionSource,
    session_id: str,
    settings: Settings,
    *,
    session_key: str | None = None,
    home_channels: dict[str, str] | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The session context every turn carries: where the message came from, whether the session
    is shared, the connected platforms and their home channels, the session id and key."""
    shared = is_shared_session(
        source,
        group_sessions_per_user=settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=settings.sessions.thread_sessions_per_user,
    )
    where = source.description
    if source.platform in _HASHED_ID_PLATFORMS:
        where = f"{source.chat_type} on {source.platform} (chat {_shown_id(source.platform, source.chat_id)})"
    homes = home_channels or {}
    platforms = [
        f"{name} (home: {_shown_id(name, homes[name]) if homes.get(name) else 'not set'})"
        for name, p in sorted(settings.platforms.items())
        if p.enabled
    ]
    key = session_key or "-"
    if source.platform in _HASHED_ID_PLATFORMS and session_key:
        key = f"{source.platform} session {hash_id(session_key)}"
    lines = [
        "You are Hermes, an AI assistant that people reach through their chat apps.",
        "",
        "Session context:",
        f"- Source: {where}",
        f"- Shared session: {'yes, several people talk here; user turns start with [Name]' if shared else 'no'}",
        f"- Connected platforms: {', '.join(platforms) or 'none'}",
        f"- Session id: {session_id}",
        f"- Session key: {key}",
    ]
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines)


def notes(turn: Turn) -> list[str]:
    found = []
    if turn.notes.resumed:
        found.append(
            "Your previous turn here was cut short before you answered; answer the user's unanswered "
            "message(s) below along with anything new."
        )
    if turn.notes.continuity_from:
        found.append(
            f"This session follows an earlier one ({turn.notes.continuity_from}); search it with "
            "session_search if the user refers to it."
        )
    if turn.kind is TurnKind.CRON:
        found.append("This is a scheduled job run: nobody is chatting; your final answer is delivered as is.")
    return found


def turn_system(turn: Turn, deps: TurnDeps) -> str:
    if turn.kind is TurnKind.CRON or turn.source is None or turn.session_id is None:
        return "You are Hermes, an AI assistant running a scheduled job.\n" + "\n".join(f"- {n}" for n in notes(turn))
    return system_prompt(
        turn.source,
        turn.session_id,
        deps.settings,
        session_key=turn.session_key,
        home_channels=deps.home_channels(),
        notes=notes(turn),
    )


def shared(turn: Turn, settings: Settings) -> bool:
    return turn.source is not None and is_shared_session(
        turn.source,
        group_sessions_per_user=settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=settings.sessions.thread_sessions_per_user,
    )


def _merge(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Consecutive plain user messages become one (a queued burst, an unanswered message)."""
    merged: list[ChatMessage] = []
    for message in messages:
        prev = merged[-1] if merged else None
        if prev is not None and prev.role == message.role == "user" and not prev.tool_calls:
            text = "\n\n".join(t for t in (prev.content, message.content) if t)
            merged[-1] = ChatMessage("user", text, images=prev.images + message.images)
        else:
            merged.append(message)
    return merged


SUMMARY_HEAD = "[A summary of the earlier conversation]"


def window(turn: Turn, deps: TurnDeps) -> list[TranscriptRow]:
    """The session's newest rows a turn reads (a chat turn's up to the message it answers): one
    bounded read."""
    assert turn.session_id is not None
    return deps.transcript.window(
        turn.session_id,
        upto_seq=turn.upto_seq if turn.kind is TurnKind.CHAT else None,
        limit=deps.settings.provider.max_history_messages,
        hidden=turn.hidden,
    )


def numbered(turn: Turn, deps: TurnDeps) -> list[tuple[TranscriptRow, ChatMessage | None]]:
    """The session's newest rows (a chat turn's up to the message it answers), each with what the
    model sees of it (None: a row it does not see): one bounded read of the newest rows."""
    rows = window(turn, deps)
    in_shared = shared(turn, deps.settings)
    # The message being answered: the user rows after the last answer (a queued burst is several)
    answered = max((row.seq for row in rows if row.role == "assistant"), default=-1)
    understood = understand_rows(turn, [r for r in rows if r.attachments], deps)
    quoted = quotes(rows, answered, deps.outbox)  # what the user rows answer, as the model reads it
    found: list[tuple[TranscriptRow, ChatMessage | None]] = []
    for row in rows:
        if row.role == "system":  # a compressed session's summary, where the session starts
            found.append((row, ChatMessage("user", f"{SUMMARY_HEAD}\n{row.content}")))
            continue
        if row.role not in ("user", "assistant"):
            found.append((row, None))
            continue
        text, images = (
            model_input(row, understood, deps, current=row.seq > answered)
            if row.attachments
            else (
                row.content,
                (),
            )
        )
        if row.seq in quoted:
            text = with_quote(text, quoted[row.seq], replied=True)
        if in_shared and row.role == "user" and row.sender_name:
            text = f"[{row.sender_name}] {text}"
        found.append((row, ChatMessage(row.role, text, images=images)))
    return found


def seen(read: Sequence[tuple[TranscriptRow, ChatMessage | None]]) -> list[ChatMessage]:
    """What the model sees of rows read, starting at a user message."""
    messages = [message for _, message in read if message is not None]
    while messages and messages[0].role != "user":
        messages.pop(0)  # a window that starts mid-conversation starts at a user message
    return messages


def transcript_messages(turn: Turn, deps: TurnDeps) -> list[ChatMessage]:
    """The session's user and assistant rows as the model sees them (a chat turn's up to the
    message it answers), starting at a user message: one bounded read of the newest rows."""
    return seen(numbered(turn, deps))


def history(
    turn: Turn,
    deps: TurnDeps,
    read: Sequence[tuple[TranscriptRow, ChatMessage | None]] | None = None,
    room: int | None = None,
) -> list[ChatMessage]:
    """The messages of the request: the newest that fit in `room` (estimated tokens; None: no
    bound but the row count), the one being answered always (cut when it alone is too large)."""
    if turn.kind is TurnKind.CRON:
        assert turn.cron is not None
        return fit([ChatMessage("user", turn.cron.prompt)], room)
    messages = seen(read if read is not None else numbered(turn, deps))
    if turn.kind is TurnKind.FLUSH:
        prompt = ChatMessage("user", FLUSH_PROMPT)
        kept = fit(messages, None if room is None else room - message_tokens(prompt)) if messages else []
        return _merge([*kept, prompt])
    if not messages or messages[-1].role != "user":
        raise PermanentError("the transcript does not end with the user's message")
    return _merge(fit(messages, room))


def fit(messages: Sequence[ChatMessage], room: int | None) -> list[ChatMessage]:
    """The newest messages whose estimates fit in `room`, oldest first, starting at a user
    message; the newest is kept in any case, cut to the room when it alone is larger."""
    if room is None or not messages:
        return list(messages)
    newest = cut(messages[-1], max(room, MIN_ROOM))
    kept, used = [newest], message_tokens(newest)
    for message in reversed(messages[:-1]):
        used += message_tokens(message)
        if used > room:
            break
        kept.append(message)
    kept.reverse()
    while len(kept) > 1 and kept[0].role != "user":
        kept.pop(0)
    return kept


def tool_context(state: TurnState, deps: TurnDeps, *, memory: bool = True) -> ToolContext:
    turn = state.turn
    source = turn.source
    user_id = (source.user_id_alt or source.user_id) if source else None
    origin = turn.reply_to.resolved() if turn.reply_to else None
    ports = deps.tool_ports
    return ToolContext(
        kind=turn.kind.value,  # type: ignore[arg-type]
        turn_id=turn.turn_id,
        profile=deps.settings.profile,
        now=deps.now(),
        sends_as=deps.settings.served_profile,
        session_id=turn.session_id,
        session_key=turn.session_key,
        # per platform: user 42 on Telegram is not user 42 on Discord
        user_hash=user_hash(source.platform, user_id) if source else None,
        source=source.to_dict() if source else None,
        origin=origin,
        home_channels=deps.home_channels(),
        time_zone=deps.settings.time_zone,
        correlation_id=turn.event_id,
        sessions=deps.catalogue,
        delivery=deps.deliveries if turn.kind is not TurnKind.FLUSH else None,
        directory=ports.get("directory"),
        jobs=ports.get("jobs") if turn.kind is TurnKind.CHAT else None,
        memory=(memory_manager(state, deps) if memory else None) or ports.get("memory"),
        reach=turn_reach(state, deps),
    )


def memory_manager(state: TurnState, deps: TurnDeps) -> MemoryManager | None:
    """The turn's memory manager, initialized with the session (providers never fail the turn)."""
    if deps.memory is None:
        return None
    manager = deps.memory()
    manager.initialize(state.turn.session_id or state.turn.turn_id, tool_context(state, deps, memory=False))
    return manager


def emit(deps: TurnDeps, name: str, turn: Turn, **extra: object) -> None:
    """Lifecycle events carry no text and no raw ids (BEHAVIOUR §8)."""
    if deps.events is None:
        return
    detail: dict[str, object] = {
        "turn_id": turn.turn_id,
        "kind": turn.kind.value,
        "session": hash_id(turn.session_key),
        "platform": turn.source.platform if turn.source else None,
        "profile": deps.settings.profile,  # which bot's agent (several may share a deployment)
        **extra,
    }
    try:
        deps.events.emit(name, detail)
    except Exception as exc:  # noqa: BLE001 - a failing hook never blocks a turn
        logger.warning("lifecycle event failed", extra={"event": name, "error": type(exc).__name__})
