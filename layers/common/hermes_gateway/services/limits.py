"""The router's check of a user's limits before a message starts or joins a turn (BEHAVIOUR §11,
Limits), and `/usage`.

A message over a limit reaches no model: no turn starts, it is not queued and not kept in the
transcript (a kept message would reach the model with the next turn's history, and be answered
after all). The user gets one short answer per limit window, saying which limit and when it
resets. Admins are exempt, and gateway commands (they call no model) are answered before this.

What it costs (docs/cost.md): the user's counts ride on the write that takes the message anyway
(the lease, or the queue), a turn's tokens and cost on the write that ends it, and the route
that message reads anyway names the user's other sessions used today. So a message reads more
only when the user used other sessions today (one batch read of their routes) or is over a limit
(the window they were told about); the first message of the day in a session notes it, and
while a limit is on finds and links the user's other sessions of the day (a put, a query and
one write per other session).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hermes_gateway.domain.access import is_admin
from hermes_gateway.domain.limits import (
    Counted,
    Counts,
    Ledger,
    Limits,
    Owner,
    Periods,
    UsageBook,
    breach,
    limit_reply,
    periods,
    spender_id,
    spender_key,
    total,
    usage_reply,
)
from hermes_gateway.domain.profiles import scoped_platform
from hermes_gateway.domain.sessions import SessionEntry
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.observability import logger
from hermes_gateway.settings import Settings


def limits_for(source: SessionSource, settings: Settings) -> Limits:
    """The limits of this user's messages: the profile's `limits.*`, with the platform's own."""
    base = settings.limits
    limits = Limits(base.messages_per_minute, base.tokens_per_day, base.usd_per_day)
    platform = settings.platforms.get(source.platform)
    return limits.overridden(platform.limits) if platform is not None and platform.limits else limits


def owner_of(source: SessionSource) -> Owner | None:
    user, spender = spender_id(source), spender_key(source)
    if user is None or spender is None:
        return None
    return Owner(scoped_platform(source.platform, source.profile), user, spender)


@dataclass(frozen=True)
class Refused:
    """The message is over `limit`; `reply` is the one answer of its window (None: already told)."""

    limit: str
    reply: str | None


@dataclass
class Gate:
    """One message's check. What it reads beyond the route (the user's other sessions, their
    counters) is read once; the user's counts on this route are taken from each read of it (the
    router reads the route again when it changed under it)."""

    source: SessionSource
    session_key: str
    settings: Settings
    book: UsageBook | None
    now: float
    _found: tuple[str, ...] = field(default=(), init=False)  # other sessions found used today
    _noted: bool = field(default=False, init=False)
    _elsewhere: Ledger | None = field(default=None, init=False)

    def admit(self, entry: SessionEntry) -> Counted | Refused | None:
        """The counts the message's write carries, or why it is refused. None: nobody to count
        (a message without a user id)."""
        owner = owner_of(self.source)
        if owner is None:
            return None
        p = periods(self.now, self.settings.time_zone)
        mine = entry.ledgers.get(owner.spender, Ledger())
        limits = limits_for(self.source, self.settings)
        checked = self.book is not None and not limits.off and not is_admin(self.source, self.settings)
        if self.book is not None and mine.counts.day != p.day and not self._noted:
            self._first_today(owner, p, find_peers=checked)
        if checked:
            peers = sorted(mine.peers.get(p.day, frozenset()) | set(self._found))
            refused = self._over(owner, mine, peers, limits, p)
            if refused is not None:
                return refused
        return Counted(owner.spender, mine.counts.plus_one(p), p, self._found)

    def _first_today(self, owner: Owner, p: Periods, *, find_peers: bool) -> None:
        """The user's first message of the day in this session: the session is noted as used
        today, and (while limits apply) linked with the user's other sessions used today, each
        way, so that their later messages find each other on the routes they read anyway. Noted
        before it looks: of two sessions starting at once, at least one sees the other."""
        assert self.book is not None
        self.book.note_used(owner, self.session_key, p)
        self._noted = True
        if not find_peers:
            return
        self._found = tuple(k for k in self.book.activity(owner, p).used_on(p.day) if k != self.session_key)
        for other in self._found:
            self.book.link(other, owner.spender, self.session_key, p)

    def _over(self, owner: Owner, mine: Ledger, peers: list[str], limits: Limits, p: Periods) -> Refused | None:
        assert self.book is not None
        if self._elsewhere is None:
            self._elsewhere = _summed(self.book.ledgers(peers, owner.spender), p) if peers else Ledger()
        found = breach(limits, total((mine, self._elsewhere), p), p)
        if found is None:
            return None
        told = self.book.told(owner) != found.window and self.book.tell(owner, found.window, p)
        logger.info("message over a limit", extra={"limit": found.limit, "told": told})
        return Refused(found.limit, limit_reply(found, p) if told else None)


def _summed(ledgers: list[Ledger], p: Periods) -> Ledger:
    """Several routes' counters of one user as one ledger of the current periods."""
    used = total(ledgers, p)
    counts = Counts(p.minute, used.minute_messages, p.day, used.day_messages, p.month, used.month_messages)
    spent = {p.day_tag: (used.day_tokens, used.day_usd), p.month_tag: (used.month_tokens, used.month_usd)}
    return Ledger(counts, spent)


def usage_report(
    source: SessionSource, session_key: str | None, route: SessionEntry | None, settings: Settings,
    book: UsageBook | None, now: float,
) -> str:  # fmt: skip
    """`/usage`: the user's messages, tokens and estimated cost today and this month, over every
    session they used this month (this chat's alone when no usage book is wired)."""
    owner = owner_of(source)
    p = periods(now, settings.time_zone)
    if owner is None:
        return "There is no user id to count usage for here."
    ledgers = [route.ledgers[owner.spender]] if route is not None and owner.spender in route.ledgers else []
    if book is not None:
        others = [key for key in book.activity(owner, p).days if key != session_key]
        ledgers += book.ledgers(others, owner.spender)
    limits = limits_for(source, settings)
    return usage_reply(total(ledgers, p), p, limits, exempt=is_admin(source, settings))
