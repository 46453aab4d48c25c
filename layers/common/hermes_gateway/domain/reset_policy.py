"""The session reset policy (BEHAVIOUR §3): when an existing session is replaced by a new one.

Pure functions of a policy, the last activity and the time, evaluated in the deployment's time
zone. The session stores (adapter and fake) both call `route_decision`, so they follow one rule.

Settings (docs/configuration.md): `sessions.reset_mode`, `sessions.reset_idle_minutes` and
`sessions.reset_at_hour` are the gateway-wide default for dm, group and channel chats;
`sessions.reset_policy` and `platforms.<p>.reset_policy` override it per chat type with the
compact form `<chat type or *>=<mode>[:<idle minutes>][@<hour>]`, entries separated by `;`
(e.g. `dm=idle:720;group=daily@5`). Threads never reset unless a policy names `thread`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo

if TYPE_CHECKING:
    from hermes_gateway.domain.sessions import SessionEntry

MODES = ("none", "idle", "daily", "both")
DEFAULT_IDLE_MINUTES = 1440
DEFAULT_AT_HOUR = 4
DEFAULT_RESUME_WINDOW_SECONDS = 3600


@dataclass(frozen=True)
class ResetPolicy:
    mode: str = "none"
    idle_minutes: int = DEFAULT_IDLE_MINUTES
    at_hour: int = DEFAULT_AT_HOUR

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"reset mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not 1 <= self.idle_minutes <= 525_600:
            raise ValueError(f"idle minutes must be between 1 and 525600, got {self.idle_minutes}")
        if not 0 <= self.at_hour <= 23:
            raise ValueError(f"the reset hour must be between 0 and 23, got {self.at_hour}")


NO_RESET = ResetPolicy()
_ENTRY = re.compile(r"^(?P<ct>\*|dm|group|channel|thread)=(?P<mode>[a-z]+)(?::(?P<idle>\d+))?(?:@(?P<hour>\d+))?$")


def parse_policy_map(text: str, base: ResetPolicy = NO_RESET) -> dict[str, ResetPolicy]:
    """`dm=idle:720;group=daily@5;*=both` -> chat type (or `*`) -> policy. Omitted minutes and
    hour come from `base`. Raises ValueError naming the bad entry."""
    policies: dict[str, ResetPolicy] = {}
    for raw in filter(None, (part.strip() for part in (text or "").split(";"))):
        match = _ENTRY.match(raw.replace(" ", ""))
        if match is None:
            raise ValueError(f"{raw!r}: expected <dm|group|channel|thread|*>=<mode>[:<idle minutes>][@<hour>]")
        chat_type = match["ct"]
        if chat_type in policies:
            raise ValueError(f"{raw!r}: {chat_type} is given twice")
        try:
            policies[chat_type] = ResetPolicy(
                match["mode"],
                int(match["idle"]) if match["idle"] else base.idle_minutes,
                int(match["hour"]) if match["hour"] else base.at_hour,
            )
        except ValueError as exc:
            raise ValueError(f"{raw!r}: {exc}") from None
    return policies


@dataclass(frozen=True)
class PolicyTable:
    """The gateway-wide default, per-chat-type overrides, and per-platform overrides."""

    default: ResetPolicy = NO_RESET
    by_chat_type: Mapping[str, ResetPolicy] = field(default_factory=dict)
    by_platform: Mapping[str, Mapping[str, ResetPolicy]] = field(default_factory=dict)

    def policy_for(self, platform: str, chat_type: str) -> ResetPolicy:
        """Most specific first: platform + chat type, platform `*`, chat type, gateway default.
        A thread follows only a policy that names `thread` explicitly."""
        own = self.by_platform.get(platform, {})
        if chat_type in own:
            return own[chat_type]
        if chat_type == "thread":
            return self.by_chat_type.get("thread", NO_RESET)
        if "*" in own:
            return own["*"]
        if chat_type in self.by_chat_type:
            return self.by_chat_type[chat_type]
        return self.by_chat_type.get("*", self.default)


@dataclass(frozen=True)
class SessionRules:
    """What a session store needs to decide resets: the policies, the time zone, and the
    auto-continue freshness window (non-positive: no window, a resume_pending entry never expires)."""

    policies: PolicyTable = field(default_factory=PolicyTable)
    time_zone: str = "UTC"
    resume_window_seconds: int = DEFAULT_RESUME_WINDOW_SECONDS
    # How long a turn's lease lasts (the turn's time limit plus a margin: no heartbeats), and how
    # long an idle route lives (its TTL; 0: forever). Deployment-wide: the same in every profile.
    lease_ttl_seconds: int = 360
    route_ttl_seconds: int = 90 * 86_400
    # `sessions.retention_days` in seconds (0: rows are kept): each transcript row's TTL (domain/retention.py)
    retention_seconds: int = 0

    # A named profile's rules, by its key namespace (`agent:coder`); the rest use these.
    by_namespace: Mapping[str, SessionRules] = field(default_factory=dict)

    def policy_for(self, platform: str, chat_type: str) -> ResetPolicy:
        return self.policies.policy_for(platform, chat_type)

    def for_key(self, session_key: str) -> SessionRules:
        """The rules of the profile whose namespace the session key is in."""
        for namespace, rules in self.by_namespace.items():
            if session_key.startswith(namespace + ":"):
                return rules
        return self


@lru_cache(maxsize=16)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def _at_hour(day: date, hour: int, tz: ZoneInfo) -> float:
    """The instant of `hour`:00 local on `day` (a time skipped by DST resolves forward)."""
    return datetime(day.year, day.month, day.day, hour, tzinfo=tz).timestamp()


def daily_boundary(now: float, at_hour: int, time_zone: str) -> float:
    """The latest `at_hour` instant at or before `now`: today's, or yesterday's before the hour."""
    tz = _zone(time_zone)
    today = datetime.fromtimestamp(now, tz).date()
    boundary = _at_hour(today, at_hour, tz)
    return boundary if boundary <= now else _at_hour(today - timedelta(days=1), at_hour, tz)


def reset_reason(policy: ResetPolicy, last_activity: float, now: float, time_zone: str) -> str | None:
    """`idle` (now > last activity + idle minutes), `daily` (the last activity is before the latest
    `at_hour`), or None. Idle is reported first when both hold."""
    if policy.mode in ("idle", "both") and now > last_activity + policy.idle_minutes * 60:
        return "idle"
    if policy.mode in ("daily", "both") and last_activity < daily_boundary(now, policy.at_hour, time_zone):
        return "daily"
    return None


def next_deadline(policy: ResetPolicy, last_activity: float, time_zone: str) -> float | None:
    """The instant after which `reset_reason` holds (for every later `now`, and no earlier one);
    None for mode none. The expiry sweep's index is keyed on it."""
    deadlines: list[float] = []
    if policy.mode in ("idle", "both"):
        deadlines.append(last_activity + policy.idle_minutes * 60)
    if policy.mode in ("daily", "both"):
        tz = _zone(time_zone)
        day = datetime.fromtimestamp(last_activity, tz).date()
        boundary = _at_hour(day, policy.at_hour, tz)
        while boundary <= last_activity:
            day += timedelta(days=1)
            boundary = _at_hour(day, policy.at_hour, tz)
        deadlines.append(boundary)
    return min(deadlines) if deadlines else None


@dataclass(frozen=True)
class RouteState:
    """What the decision reads from a routing entry and its session."""

    platform: str
    chat_type: str
    last_activity_at: float
    suspended: bool = False
    resume_pending: bool = False
    resume_marked_at: float | None = None
    lease_held: bool = False  # a lease that has not expired: active work
    session_ended: bool = False  # (or missing): the route is stale


@dataclass(frozen=True)
class RouteDecision:
    reason: str | None  # None: reuse the entry
    auto_reset: bool = False  # the policy (not a user or an operator) replaced the session
    auto_continue: bool = False  # reuse a resume_pending entry: the next turn continues it


def route_decision(state: RouteState, rules: SessionRules, now: float) -> RouteDecision:
    """BEHAVIOUR §3's order: suspended; resume_pending (the policy's reason, else
    `resume_pending_expired` past the window, mode none resumes); the policy; then the
    active-work guard (a held lease blocks every one of those); then stale-route self-heal."""
    policy = rules.policy_for(state.platform, state.chat_type)
    policy_reason = reset_reason(policy, state.last_activity_at, now, rules.time_zone)
    decision = RouteDecision(None)
    if state.suspended:
        decision = RouteDecision("suspended")
    elif state.resume_pending:
        marked = state.resume_marked_at if state.resume_marked_at is not None else state.last_activity_at
        window = rules.resume_window_seconds
        if policy_reason is not None:
            decision = RouteDecision(policy_reason, auto_reset=True)
        elif policy.mode != "none" and window > 0 and now - marked > window:
            decision = RouteDecision("resume_pending_expired", auto_reset=True)
        else:
            decision = RouteDecision(None, auto_continue=True)
    elif policy_reason is not None:
        decision = RouteDecision(policy_reason, auto_reset=True)
    if decision.reason is not None and state.lease_held:
        return RouteDecision(None)  # never reset a session with active work
    if decision.reason is None and state.session_ended:
        return RouteDecision("stale_route")
    return decision


_NOTICE_WHY = {
    "idle": "after a quiet spell",
    "daily": "for the new day",
    "resume_pending_expired": "because the last reply was cut short too long ago",
    "suspended": "because it kept failing",
}


def reset_notice(reason: str | None) -> str:
    """The one short line a chat gets when its session was replaced automatically."""
    why = _NOTICE_WHY.get(reason or "", "")
    return f"Started a fresh session{' ' + why if why else ''}. Use /resume to go back to the previous one."


class _NoticeSwitch(Protocol):
    @property
    def reset_notice(self) -> bool: ...


class NoticeSwitches(Protocol):
    """What the notice reads of the settings (`hermes_gateway.settings.Settings` is one): the
    domain imports no settings, the settings import the domain."""

    @property
    def platforms(self) -> Mapping[str, _NoticeSwitch]: ...


def wants_reset_notice(entry: SessionEntry, settings: NoticeSwitches) -> bool:
    """True for the call that replaced a session automatically (the policy, or a suspension),
    unless notices are off for the entry's platform (`platforms.<p>.reset_notice`)."""
    if not (entry.created and entry.reset_reason and (entry.was_auto_reset or entry.reset_reason == "suspended")):
        return False
    platform = settings.platforms.get(entry.platform)
    return platform is None or platform.reset_notice
