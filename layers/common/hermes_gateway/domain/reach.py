"""What a turn may reach (BEHAVIOUR §11): the sessions it may search, as pure rules.

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

from dataclasses import dataclass

from hermes_gateway.domain.source import SessionSource

SEARCH_SCOPES = ("user", "chat", "profile")


def session_reach(namespace: str, source: SessionSource) -> str:
    """The `by_reach` partition of a session `source` opens in the key namespace `namespace`."""
    if source.chat_type == "dm":
        who = source.user_id_alt or source.user_id or source.chat_id or "-"
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
