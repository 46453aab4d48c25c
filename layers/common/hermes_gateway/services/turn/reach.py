"""A turn's reach (BEHAVIOUR §11, `domain.reach`), decided from the turn and the settings alone:
whom the turn serves (a chat turn's sender, a cron job's creator), what it may search, where it
sends without asking, which URLs it may fetch and whose stored files it may attach."""

from __future__ import annotations

from hermes_gateway.domain.access import is_admin
from hermes_gateway.domain.reach import MediaReach, SendReach, TurnReach, search_scope, urls_in
from hermes_gateway.domain.session_key import build_session_key, key_namespace
from hermes_gateway.domain.sessions import profile_of_key
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.targets import ReplyTarget
from hermes_gateway.domain.turn_state import TurnKind, TurnState
from hermes_gateway.services.turn.deps import TurnDeps
from hermes_gateway.settings import Settings


def served(state: TurnState) -> SessionSource | None:
    """The person the turn acts for: a chat's sender, a cron job's creator (None: nobody known)."""
    turn = state.turn
    if turn.kind is TurnKind.CRON:
        return turn.cron.creator if turn.cron is not None else None
    return turn.source


def turn_reach(state: TurnState, deps: TurnDeps) -> TurnReach:
    turn, settings = state.turn, deps.settings
    who = served(state)
    namespace = profile_of_key(turn.session_key) if turn.session_key else key_namespace(settings.profile)
    session_key = turn.session_key or (_key_of(who, settings) if who is not None else None)
    admin = who is not None and is_admin(who, settings)
    search = search_scope(
        namespace, who, scope=settings.tools.session_search_scope, admin=admin, session_key=session_key
    )
    own = turn.reply_to.resolved() if turn.reply_to is not None else None
    if own is None and turn.cron is not None and turn.cron.origin:
        own = ReplyTarget.from_dict(turn.cron.origin).resolved()
    return TurnReach(
        search=search,
        admin=admin,
        send=SendReach(own, settings.tools.send_message_targets),
        media=MediaReach(frozenset(seen_urls(state)), settings.media.outbound_hosts),
        # a cron run or a memory flush attaches no stored file: it answers no one's message
        files_session=turn.session_id if turn.kind is TurnKind.CHAT else None,
    )


def seen_urls(state: TurnState) -> set[str]:
    """The URLs this turn was given: in the user's message (a cron job's prompt), the messages
    that steered it, and its tool results."""
    turn = state.turn
    texts = [turn.user_text, turn.cron.prompt if turn.cron is not None else ""]
    texts += [m.content for m in state.loop.messages if m.role in ("user", "tool")]
    found: set[str] = set()
    for text in texts:
        found |= urls_in(text or "")
    return found


def _key_of(source: SessionSource, settings: Settings) -> str:
    return build_session_key(
        source,
        group_sessions_per_user=settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=settings.sessions.thread_sessions_per_user,
        profile=settings.profile,
    )
