"""Session keys: the one pure function that decides which conversation a message belongs to.

BEHAVIOUR §2 is the specification; every rule there has a test in tests/unit/test_session_key.py.

Two conversations must never share a key. The parts are joined with `:`, so a key is read back
unambiguously only when no part can pass for another. That holds for most platforms by the shape of
their ids (Slack's thread `1700000000.000100` is no user `U123`, Matrix ids carry sigils), and
their keys stay exactly as Hermes writes them. Where it does not, the colliding forms are told apart:
- platforms whose thread ids and user ids come from one space (Telegram numbers both; the generic
  webhook takes both as free text): a thread's shared session says `thread` in the chat-type slot,
  so topic 77's session is not user 77's session in the General topic of the same forum;
- platforms whose ids are free text (the generic webhook): `%` and `:` inside a part are
  percent-encoded, so chat `x:y` is not chat `x` in thread `y`.
"""

from __future__ import annotations

import re

from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import InvalidIdentifier

_WHATSAPP_SUFFIXES = ("@s.whatsapp.net", "@lid", "@c.us")
_DEVICE_SUFFIX = re.compile(r":\d+$")
_DRIVE = re.compile(r"^[A-Za-z]:")
_THREADS_LIKE_USERS = frozenset({"telegram", "webhook"})
_FREE_TEXT_IDS = frozenset({"webhook"})
# A BlueBubbles chat GUID: `<service>;-;<handle address>` (a DM) or `<service>;+;<chat identifier>`
# (a group), the service `iMessage`, `SMS`, or `any` since macOS 26.
_BLUEBUBBLES_CHAT = re.compile(r"^[^;:]+;[-+];(.+)$")


def key_namespace(profile: str | None) -> str:
    """`agent:main` for the default profile; a profile literally named `main` gets `agent:main~`."""
    if not profile or profile == "default":
        return "agent:main"
    if profile == "main":
        return "agent:main~"
    return f"agent:{profile}"


def canonical_whatsapp_id(value: str, lid_to_phone: dict[str, str] | None = None) -> str:
    """One form per WhatsApp person: no JID suffix, no `:device`, no leading `+`; LIDs mapped to
    their phone number when known. Group ids (`…@g.us`) are kept as they are."""
    text = value.strip()
    if text.endswith("@g.us"):
        return text
    is_lid = text.endswith("@lid")
    for suffix in _WHATSAPP_SUFFIXES:
        if text.endswith(suffix):
            text = text[: -len(suffix)]
            break
    text = _DEVICE_SUFFIX.sub("", text).lstrip("+")
    if lid_to_phone:
        mapped = lid_to_phone.get(text)
        if mapped and (is_lid or text in lid_to_phone):
            return canonical_whatsapp_id(mapped)
    return text


def canonical_bluebubbles_chat(chat_id: str) -> str:
    """A BlueBubbles chat by its identifier alone, without the service its GUID names: one person's
    iMessage and SMS conversations are one, and a chat keeps its session when macOS 26 renames its
    GUIDs `any;-;...`. Anything else is kept as it is."""
    found = _BLUEBUBBLES_CHAT.match(chat_id)
    return found.group(1) if found else chat_id


def _chat_part(source: SessionSource, lid_to_phone: dict[str, str] | None) -> str | None:
    """The chat id as the key holds it: a WhatsApp DM's canonical, a BlueBubbles chat's identifier."""
    chat_id = source.chat_id
    if chat_id and source.platform == "bluebubbles":
        return canonical_bluebubbles_chat(chat_id)
    if chat_id and source.platform == "whatsapp" and source.chat_type == "dm":
        return canonical_whatsapp_id(chat_id, lid_to_phone)
    return chat_id


def _participant(source: SessionSource, lid_to_phone: dict[str, str] | None) -> str | None:
    participant = source.user_id_alt or source.user_id
    if participant and source.platform == "whatsapp":
        return canonical_whatsapp_id(participant, lid_to_phone) or participant
    return participant


def build_session_key(
    source: SessionSource,
    *,
    group_sessions_per_user: bool = True,
    thread_sessions_per_user: bool = False,
    profile: str | None = None,
    lid_to_phone: dict[str, str] | None = None,
) -> str:
    """The session key for a source (BEHAVIOUR §2). Pure: same source and settings, same key."""
    namespace = key_namespace(profile if profile is not None else source.profile)
    slack_scope = source.scope_id if source.platform == "slack" and source.scope_id else None
    ids: list[str] = []  # the parts after the chat-type slot

    if source.chat_type == "dm":
        slot = "dm"
        if slack_scope:
            ids.append(slack_scope)
        chat_id = _chat_part(source, lid_to_phone)
        if chat_id:
            ids.append(chat_id)
        else:
            sender = _participant(source, lid_to_phone)
            if sender:
                ids.append(sender)
        if source.thread_id:
            ids.append(source.thread_id)
        return _joined(namespace, source.platform, slot, ids)

    thread = source.thread_id or source.prospective_thread_id
    # A channel message that opens a thread and the thread's later messages share one key.
    slot = "thread" if source.prospective_thread_id and not source.thread_id else source.chat_type
    if slack_scope:
        ids.append(slack_scope)
    chat_id = _chat_part(source, lid_to_phone)
    if chat_id:
        ids.append(chat_id)
    if thread:
        ids.append(thread)
    isolate = group_sessions_per_user and (thread_sessions_per_user if thread else True)
    participant = _participant(source, lid_to_phone)
    if isolate and participant:
        ids.append(participant)
    elif thread and source.platform in _THREADS_LIKE_USERS:
        slot = "thread"  # chat:thread would read as chat:participant
    return _joined(namespace, source.platform, slot, ids)


def _joined(namespace: str, platform: str, slot: str, ids: list[str]) -> str:
    if platform in _FREE_TEXT_IDS:
        ids = [part.replace("%", "%25").replace(":", "%3A") for part in ids]
    return validate_session_key(":".join([namespace, platform, slot, *ids]))


def is_shared_session(
    source: SessionSource, *, group_sessions_per_user: bool = True, thread_sessions_per_user: bool = False
) -> bool:
    """Several people talk in this session (BEHAVIOUR §2): their turns are prefixed with names."""
    if source.chat_type == "dm":
        return False
    if source.thread_id or source.prospective_thread_id:
        return not (thread_sessions_per_user and group_sessions_per_user)
    return not group_sessions_per_user


def validate_session_key(key: str) -> str:
    """A key may hold an interior `/` (Google Chat spaces) but never `..` or a leading separator."""
    if not key or ".." in key or key[0] in "/\\" or "\x00" in key:
        # The value itself stays out of the message: it holds platform ids, and messages reach logs.
        raise InvalidIdentifier("unsafe session key: it contains '..', a NUL or a leading separator")
    return key


def validate_session_id(session_id: str) -> str:
    """A session id is a storage key: no `..`, `/`, `\\`, NUL or leading drive letter."""
    if (
        not session_id
        or ".." in session_id
        or "/" in session_id
        or "\\" in session_id
        or "\x00" in session_id
        or _DRIVE.match(session_id)
    ):
        raise InvalidIdentifier("unsafe session id: it contains '..', a separator, a NUL or a drive letter")
    return session_id
