"""What one user may spend (BEHAVIOUR §11, Limits): messages a minute, tokens and dollars a day,
per user and profile; and what they have spent, for the checks and for `/usage`.

Pure rules over values; the router reads and writes the counters (`services/limits.py`), the
stores keep them where a write happens anyway (`adapters/route_item.py`):

- on each route (one per session key), per user (`spender_key`): the message counts of the
  current minute, day and month (`Counts`), set by the router's own write of the message (the
  lease taken, or the message queued); the tokens and estimated dollars of the turns that user
  started, by day and by month (`Ledger.spent`), added by the turn's finishing write; and the
  user's other sessions used today (`Ledger.peers`), so the sum over them needs no lookup;
- per user and profile, outside the routes, which sessions they used today and this month, and
  the limit window they were last told about (`UsageBook`), read on their first message of the
  day in a session (when the peers are found and told about each other), by `/usage`, and past
  a limit.

A user's usage is the sum over their sessions' routes. Days are the deployment's days
(`time_zone`, UTC by default); the minute is a clock minute. Every window resets at its end.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, time, timedelta
from functools import lru_cache
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from hermes_gateway.domain.session_key import canonical_whatsapp_id
from hermes_gateway.domain.source import SessionSource

LIMIT_NAMES = ("messages_per_minute", "tokens_per_day", "usd_per_day")
_EPOCH_DAY = date(1970, 1, 1)


# -- the limits --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """0 turns a limit off."""

    messages_per_minute: int = 0
    tokens_per_day: int = 0
    usd_per_day: float = 0.0

    @property
    def off(self) -> bool:
        return not (self.messages_per_minute or self.tokens_per_day or self.usd_per_day)

    def overridden(self, text: str) -> Limits:
        """These limits with a platform's overrides (`parse_overrides`) applied."""
        changes = parse_overrides(text)
        return Limits(
            int(changes.get("messages_per_minute", self.messages_per_minute)),
            int(changes.get("tokens_per_day", self.tokens_per_day)),
            changes.get("usd_per_day", self.usd_per_day),
        )


_OVERRIDE = re.compile(r"^(?P<name>[a-z_]+)=(?P<value>\d+(?:\.\d+)?)$")


def parse_overrides(text: str) -> dict[str, float]:
    """`messages_per_minute=5;usd_per_day=0.5` -> {name: value}. Raises ValueError naming the
    entry at fault (an unknown limit, a value that is not a number of 0 or more, a fraction of a
    message or token)."""
    found: dict[str, float] = {}
    for raw in filter(None, (part.strip() for part in (text or "").split(";"))):
        match = _OVERRIDE.match(raw.replace(" ", ""))
        if match is None or match["name"] not in LIMIT_NAMES:
            raise ValueError(f"{raw!r}: expected <{'|'.join(LIMIT_NAMES)}>=<number>")
        value = float(match["value"])
        if match["name"] != "usd_per_day" and not value.is_integer():
            raise ValueError(f"{raw!r}: {match['name']} is a whole number")
        found[match["name"]] = value
    return found


# -- clock windows -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Periods:
    """The windows `now` falls in: the clock minute, and the day and month of `time_zone`
    (numbered: days and months since 1970), with when the minute and the day end."""

    now: float
    time_zone: str
    minute: int
    day: int
    month: int
    minute_ends: float
    day_ends: float

    @property
    def day_tag(self) -> str:
        return f"d{self.day}"

    @property
    def month_tag(self) -> str:
        return f"m{self.month}"


@lru_cache(maxsize=16)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def periods(now: float, time_zone: str = "UTC") -> Periods:
    zone = _zone(time_zone)
    local = datetime.fromtimestamp(now, zone)
    tomorrow = datetime.combine(local.date() + timedelta(days=1), time(0), zone)
    minute = int(now // 60)
    return Periods(
        now=now,
        time_zone=time_zone,
        minute=minute,
        day=(local.date() - _EPOCH_DAY).days,
        month=(local.year - 1970) * 12 + local.month - 1,
        minute_ends=(minute + 1) * 60.0,
        day_ends=tomorrow.timestamp(),
    )


# -- who spends --------------------------------------------------------------------------------


def spender_id(source: SessionSource) -> str | None:
    """The id a user's usage is kept under: the one their per-user session keys carry
    (`user_id_alt`, else `user_id`; WhatsApp's in canonical form). None: no user to count."""
    user = source.user_id_alt or source.user_id
    if user and source.platform == "whatsapp":
        return canonical_whatsapp_id(user) or user
    return user


def spender_key(source: SessionSource) -> str | None:
    """How a route names the user's counters: 8 hex characters of the platform and user id (a
    route is one profile's, and holds its users' counters only)."""
    user = spender_id(source)
    if not user:
        return None
    return hashlib.sha256(f"{source.platform}|{user}".encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Owner:
    """A user of one profile's bot on one platform: whose limits apply (`platform` as the
    profile's data is stored, `telegram@coder` for a named profile; domain/profiles.py)."""

    platform: str
    user_id: str
    spender: str  # spender_key: the name of the user's counters on a route


# -- what a route holds for one user -----------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    """A user's messages on one route: in the minute, day and month each count was last set in."""

    minute: int = 0
    minute_messages: int = 0
    day: int = 0
    day_messages: int = 0
    month: int = 0
    month_messages: int = 0

    def at(self, p: Periods) -> Counts:
        """The counts as of `p`: a window that has ended counts nothing."""
        return Counts(
            p.minute,
            self.minute_messages if self.minute == p.minute else 0,
            p.day,
            self.day_messages if self.day == p.day else 0,
            p.month,
            self.month_messages if self.month == p.month else 0,
        )

    def plus_one(self, p: Periods) -> Counts:
        now = self.at(p)
        return replace(
            now,
            minute_messages=now.minute_messages + 1,
            day_messages=now.day_messages + 1,
            month_messages=now.month_messages + 1,
        )

    def as_list(self) -> list[int]:
        return [self.minute, self.minute_messages, self.day, self.day_messages, self.month, self.month_messages]

    @classmethod
    def from_list(cls, raw: Sequence[object]) -> Counts:
        values = [int(str(v)) for v in list(raw)[:6]]
        return cls(*values) if len(values) == 6 else cls()


@dataclass(frozen=True)
class Usage:
    """What a user used, as of a time: messages this minute; messages, tokens and estimated
    dollars today and this month."""

    minute_messages: int = 0
    day_messages: int = 0
    day_tokens: int = 0
    day_usd: float = 0.0
    month_messages: int = 0
    month_tokens: int = 0
    month_usd: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.minute_messages + other.minute_messages,
            self.day_messages + other.day_messages,
            self.day_tokens + other.day_tokens,
            self.day_usd + other.day_usd,
            self.month_messages + other.month_messages,
            self.month_tokens + other.month_tokens,
            self.month_usd + other.month_usd,
        )


@dataclass(frozen=True)
class Ledger:
    """One user's counters on one route: their message counts, the tokens and dollars of the
    turns they started by period tag (`d<day>`, `m<month>`), and by day the user's other
    sessions used that day (their session keys)."""

    counts: Counts = field(default_factory=Counts)
    spent: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    peers: Mapping[int, frozenset[str]] = field(default_factory=dict)

    def usage(self, p: Periods) -> Usage:
        counts = self.counts.at(p)
        day_tokens, day_usd = self.spent.get(p.day_tag, (0, 0.0))
        month_tokens, month_usd = self.spent.get(p.month_tag, (0, 0.0))
        return Usage(
            counts.minute_messages,
            counts.day_messages,
            day_tokens,
            day_usd,
            counts.month_messages,
            month_tokens,
            month_usd,
        )

    def stale_tags(self, p: Periods) -> list[str]:
        """The period tags of days and months that have ended: nothing reads them any more."""
        stale = []
        for tag in self.spent:
            number = int(tag[1:])
            if (tag[0] == "d" and number < p.day) or (tag[0] == "m" and number < p.month):
                stale.append(tag)
        return stale

    def stale_peer_days(self, p: Periods) -> list[int]:
        return [day for day in self.peers if day < p.day]


def total(ledgers: Iterable[Ledger], p: Periods) -> Usage:
    found = Usage()
    for ledger in ledgers:
        found = found + ledger.usage(p)
    return found


@dataclass(frozen=True)
class Counted:
    """What the router's write of an admitted message carries: the user's counts with it, the
    periods they were counted in (the write also drops the route's counters of ended periods),
    and the user's other sessions found used today (`peers`, on their first message of the day
    here)."""

    spender: str
    counts: Counts
    periods: Periods
    peers: tuple[str, ...] = ()


# -- the rule ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Breach:
    """A limit a user has reached: which, its value, when it resets, and the window it is
    reached in (the user is told once per window)."""

    limit: str
    allowed: float
    resets_at: float
    window: str


def breach(limits: Limits, used: Usage, p: Periods) -> Breach | None:
    """The limit this user's next message would go past, if any. When several are reached, the
    one that resets last: a message sent before then is refused anyway."""
    found: list[Breach] = []
    if limits.tokens_per_day and used.day_tokens >= limits.tokens_per_day:
        found.append(Breach("tokens_per_day", limits.tokens_per_day, p.day_ends, f"tokens_per_day@{p.day}"))
    if limits.usd_per_day and used.day_usd >= limits.usd_per_day:
        found.append(Breach("usd_per_day", limits.usd_per_day, p.day_ends, f"usd_per_day@{p.day}"))
    if limits.messages_per_minute and used.minute_messages >= limits.messages_per_minute:
        found.append(
            Breach("messages_per_minute", limits.messages_per_minute, p.minute_ends, f"messages_per_minute@{p.minute}")
        )
    return max(found, key=lambda b: b.resets_at) if found else None


def _amount(limit: str, value: float) -> str:
    if limit == "usd_per_day":
        return f"${value:,.2f} of model use a day"
    if limit == "tokens_per_day":
        return f"{int(value):,} tokens a day"
    return f"{int(value)} messages a minute"


def _wait(seconds: float) -> str:
    seconds = max(1, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"


def limit_reply(found: Breach, p: Periods) -> str:
    """The one short answer a user gets in a window: which limit, and when it resets."""
    at = datetime.fromtimestamp(found.resets_at, _zone(p.time_zone))
    clock = at.strftime("%H:%M") if found.limit != "messages_per_minute" else at.strftime("%H:%M:%S")
    return (
        f"Limit reached: {_amount(found.limit, found.allowed)}. It resets at {clock} {p.time_zone} "
        f"(in {_wait(found.resets_at - p.now)}); until then your messages are not answered."
    )


def usage_reply(today: Usage, p: Periods, limits: Limits, *, exempt: bool) -> str:
    """`/usage`: the user's messages, tokens and estimated cost today and this month."""
    month = datetime.fromtimestamp(p.now, _zone(p.time_zone)).strftime("%B")
    lines = [
        f"Your usage (days in {p.time_zone}):",
        f"Today: {today.day_messages} messages, {today.day_tokens:,} tokens, about ${today.day_usd:,.4f}",
        f"This month ({month}): {today.month_messages} messages, {today.month_tokens:,} tokens, "
        f"about ${today.month_usd:,.4f}",
    ]
    if exempt:
        lines.append("Limits: none for you (admin).")
    elif limits.off:
        lines.append("Limits: none.")
    else:
        named = [_amount(name, getattr(limits, name)) for name in LIMIT_NAMES if getattr(limits, name)]
        lines.append("Limits: " + "; ".join(named) + ".")
    lines.append("Costs are estimates from list prices; a model without a listed price counts as $0.")
    return "\n".join(lines)


# -- where the cross-session facts are kept ----------------------------------------------------


@dataclass(frozen=True)
class Activity:
    """A user's sessions with usage this month: session key -> the last day it was used."""

    days: Mapping[str, int] = field(default_factory=dict)

    def used_on(self, day: int) -> list[str]:
        return sorted(key for key, last in self.days.items() if last == day)


class UsageBook(Protocol):
    """Per user and profile: which sessions they used (so their usage can be summed over them),
    and which limit window they were told about (so they are told once)."""

    def activity(self, owner: Owner, p: Periods) -> Activity:
        """The user's sessions used this month (one strongly consistent read: a session noted
        before it is seen)."""
        ...

    def note_used(self, owner: Owner, session_key: str, p: Periods) -> None:
        """The user used this session today (written once per session and day)."""
        ...

    def link(self, session_key: str, spender: str, peer: str, p: Periods) -> None:
        """Tell the route of `session_key` that its user `spender` used `peer` today too (added to
        the route's set, so links made at once by several sessions all stay)."""
        ...

    def ledgers(self, session_keys: Sequence[str], spender: str) -> list[Ledger]:
        """The user's counters on each of these routes (a missing route or user: none)."""
        ...

    def told(self, owner: Owner) -> str | None:
        """The limit window the user was last told about (an eventually consistent read)."""
        ...

    def tell(self, owner: Owner, window: str, p: Periods) -> bool:
        """Claim the one answer of a limit window: True for the first caller only."""
        ...

    def held(self, owner: Owner) -> dict[str, Any]:
        """What is kept of the user (their export, BEHAVIOUR §11): the sessions they used (key,
        day, month), the window they were last told about, and their counters on those routes."""
        ...

    def forget(self, owner: Owner) -> int:
        """Delete what is kept of the user: their counters on the routes of the sessions they
        used, and their own records here; how many routes and records that was."""
        ...
