"""What a turn may reach (BEHAVIOUR §11): the sessions it searches, the chats it sends to
without asking, the URLs it fetches and the stored files it attaches, as pure rules.

A turn serves one user in one chat, and what the model asks for is input from that user. Every
session record carries its `reach` (the sessions table's `by_reach` index): a DM session is its
user's (`<namespace>|dm|<platform>|<user>`), any other session is its chat's
(`<namespace>|chat|<platform>|<chat>`). A turn's search scope then names one index partition:

| scope | in a DM | in a group |
|---|---|---|
| `chat` | this chat's sessions (the same session key) | the same |
| `user` (default) | the user's DM sessions on this platform | the group's sessions |
| `profile` | every session of the profile | the same |

Admins search the profile whatever the scope. A cron job's turn has the reach of the chat and
user that created it (its origin); a turn with no source at all searches nothing but itself.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from hermes_gateway.domain.session_key import canonical_whatsapp_id
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.targets import ResolvedTarget

SEARCH_SCOPES = ("user", "chat", "profile")


def session_reach(namespace: str, source: SessionSource) -> str:
    """The `by_reach` partition of a session `source` opens in the key namespace `namespace`."""
    if source.chat_type == "dm":
        who = source.user_id_alt or source.user_id or source.chat_id or "-"
        if source.platform == "whatsapp":
            who = canonical_whatsapp_id(who)  # one person, whichever form of their id came
        return f"{namespace}|dm|{source.platform}|{who}"
    # A workspace's channel ids are its own (Slack): the workspace is part of the chat.
    chat = f"{source.scope_id}/{source.chat_id or '-'}" if source.scope_id else source.chat_id or "-"
    return f"{namespace}|chat|{source.platform}|{chat}"


@dataclass(frozen=True)
class SearchScope:
    """Which sessions a search reads: exactly one of the three is the bound (the namespace is
    always one: another profile's sessions are never read)."""

    namespace: str
    reach: str | None = None  # the `by_reach` partition
    session_key: str | None = None  # one key's sessions (`by_key`)

    @property
    def whole_profile(self) -> bool:
        return self.reach is None and self.session_key is None

    @property
    def label(self) -> str:
        if self.session_key is not None:
            return "chat"
        return "user" if self.reach is not None else "profile"


def search_scope(
    namespace: str,
    source: SessionSource | None,
    *,
    scope: str,
    admin: bool = False,
    session_key: str | None = None,
) -> SearchScope:
    """The sessions a turn serving `source` (its session `session_key`) may search."""
    if scope not in SEARCH_SCOPES:
        raise ValueError(f"unknown search scope {scope!r}")
    if admin or scope == "profile":
        return SearchScope(namespace)
    if scope == "chat" and session_key:
        return SearchScope(namespace, session_key=session_key)
    if source is None:
        # Nobody to stand for: the turn's own session at most (a key no session has otherwise).
        return SearchScope(namespace, session_key=session_key or f"{namespace}:-")
    return SearchScope(namespace, reach=session_reach(namespace, source))


# --- sending -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SendReach:
    """Where a turn may send without asking: its own chat, a home channel (a bare platform
    name), `local`, and the targets the operator listed (`tools.send_message_targets`, as
    written or as `platform:chat_id`). Anywhere else needs an approval by an admin or approver."""

    own: ResolvedTarget | None = None
    listed: tuple[str, ...] = ()

    def needs_approval(self, spec: str, target: ResolvedTarget) -> bool:
        text = " ".join(spec.split())
        if target.platform == "local" or text.lower() == "origin":
            return False
        if self.own is not None and (target.platform, target.chat_id) == (self.own.platform, self.own.chat_id):
            return False
        if text.lower() == target.platform:
            return False  # the platform's home channel (BEHAVIOUR §6)
        return not any(_listed(entry, text, target) for entry in self.listed)


def _listed(entry: str, spec: str, target: ResolvedTarget) -> bool:
    """`entry` names the target: as the model wrote it, or as `platform:chat_id` (any of its
    threads) or `platform:chat_id:thread_id` (that thread)."""
    entry = entry.strip()
    if entry.casefold() == spec.casefold():
        return True
    head, sep, rest = entry.partition(":")
    if not sep or head.lower() != target.platform:
        return False
    return rest in (target.chat_id, f"{target.chat_id}:{target.thread_id}")


# --- fetching ------------------------------------------------------------------------------------

_URL = re.compile(r"https?://[^\s<>\"'`]+", re.IGNORECASE)
_TRAILING = ".,;:!?)]}>*_'\""


def urls_in(text: str) -> set[str]:
    """The URLs a text holds, each as written and without the punctuation a sentence puts after it."""
    found = set()
    for match in _URL.finditer(text):
        url = match.group(0)
        found.add(url)
        found.add(url.rstrip(_TRAILING))
    return found


@dataclass(frozen=True)
class MediaReach:
    """Which `MEDIA:` URLs a turn may fetch: one that came, exactly, from this turn's user message
    or its tool results (so a URL the model makes up, with the conversation in its query string,
    is never requested), or one on a host the operator listed (`media.outbound_hosts`; `*.` also
    takes its subdomains). Stored keys are the delivery's to check (against the job's session)."""

    seen: frozenset[str] = frozenset()
    hosts: tuple[str, ...] = ()

    def allows(self, reference: str) -> bool:
        if not reference.lower().startswith(("https://", "http://")):
            return True
        if reference in self.seen:
            return True
        try:
            host = (urllib.parse.urlsplit(reference).hostname or "").lower()
        except ValueError:
            return False
        return bool(host) and any(_host_listed(host, entry) for entry in self.hosts)


def _host_listed(host: str, entry: str) -> bool:
    entry = entry.strip().lower().rstrip(".")
    if entry.startswith("*."):
        return host.endswith(entry[1:])
    return host == entry


@dataclass(frozen=True)
class TurnReach:
    """Everything a turn may reach, decided once from the turn (never from what the model wrote)."""

    search: SearchScope
    admin: bool = False  # the person served is an admin (every job, the whole profile's search)
    send: SendReach = SendReach()
    media: MediaReach = MediaReach()
    files_session: str | None = None  # the session whose stored files it may attach (None: none)
