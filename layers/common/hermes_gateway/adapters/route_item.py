"""The route item of the routes table: its attributes, and how it reads as domain values.

One item per session key holds the session's live state (ARCHITECTURE §3): which session the key
points at and its fences (`revision`, `execution_generation`), the reset policy's clock and flags,
the turn lease and what waits on it (queued messages, an approval), the transcript's seq counter
(`next_seq`) and the live session's totals (`n_msgs`, `tok_*`, `usd`, `turns_*`): a message's path
reads it once and changes it in one conditional write at each end of its turn.

Attribute names are those the routes table has always had, plus the short names of the fields
the lean path added (a route write costs a write unit per KB, names included). The session record
(sessions table) keeps the totals the route had when it moved to another session: a session's
totals are its record's plus, while it is live, its route's.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from hermes_gateway.domain.limits import Counted, Counts, Ledger, Periods
from hermes_gateway.domain.reset_policy import SessionRules, next_deadline
from hermes_gateway.domain.service_window import SERVICE_WINDOWS
from hermes_gateway.domain.sessions import MAX_FAILED_RECOVERIES, ModelOverride, SessionEntry, SessionTally, event_mark
from hermes_gateway.domain.turn_state import Turn
from hermes_gateway.domain.turns import ControlState, PendingApproval, QueuedInput

Item = dict[str, Any]

# Only while something waits on the lease (queued messages, an approval) does a route carry
# `lease_shard`: the sparse `by_lease_expiry` index the tick reads to recover them when the lease
# outlives its turn. A plain turn never enters it (no index write per message); a lease that
# expired under a plain turn is taken over by the session's next message.
WATCH_SHARD = "lease"
LEASE_ATTRS = ("lease_token", "lease_turn_id", "lease_started_at", "lease_expires_at", "lease_reply_seq", "lease_shard")
POLICY_SHARDS = 4  # the deadline index's partitions
RECENT_EVENTS = 8  # events remembered per route: a redelivered message is recognized
# Counters of the live session: attribute -> SessionTally field.
TALLY_ATTRS = {
    "n_msgs": "message_count",
    "tok_in": "input_tokens",
    "tok_out": "output_tokens",
    "tok_cr": "cache_read_tokens",
    "tok_cw": "cache_write_tokens",
    "usd": "cost_usd",
    "turns_est": "estimated_turns",
    "turns_unk": "unknown_turns",
    "turns_inc": "included_turns",
}
TALLY_PROMPT = "tok_prompt"
TALLY_RATIO = "tok_ratio"  # kept through resets and compressions: it is the model's, not the session's
# What a reset clears along with the session's identity.
RESET_CLEARED = (
    "resume_reason",
    "resume_marked_at",
    "stop_turn_id",
    "hidden",
    "ended",
    TALLY_PROMPT,
    *TALLY_ATTRS,
)
LEGACY = ("activity_shard",)  # the by_activity index's key: no longer written, removed on write
# Each user's counters (domain/limits.py), named by the user's spender key: `uq<key>` the message
# counts (a list, set by the router's write of a message), `ut<key><tag>` and `uc<key><tag>` the
# tokens and estimated dollars of the user's turns in a day (`d<day>`) or month (`m<month>`),
# added by the turn's finishing write, and `up<key>d<day>` the user's other sessions used that
# day (a string set: sessions link to each other by adding to it). Never cleared by a reset: they
# are the user's, not the session's. About 110 bytes a user (and each peer's key), so a route of
# one user stays one write unit.
_LEDGER_ATTR = re.compile(r"^u([qtcp])([0-9a-f]{8})([dm][0-9]+)?$")


def shard(session_key: str, shards: int = POLICY_SHARDS) -> str:
    return str(int(hashlib.sha256(session_key.encode()).hexdigest()[:8], 16) % shards)


def remember(recent: tuple[str, ...], event_id: str) -> list[str]:
    return [*[m for m in recent if m != event_mark(event_id)], event_mark(event_id)][-RECENT_EVENTS:]


def _num(value: Any) -> float | None:
    return float(value) if value is not None else None


def _int(value: Any) -> int | None:
    return int(value) if value is not None else None


def tally(item: Mapping[str, Any]) -> SessionTally:
    values: dict[str, Any] = {field: item.get(attr) or 0 for attr, field in TALLY_ATTRS.items()}
    values["cost_usd"] = float(values["cost_usd"])
    values["last_prompt_tokens"] = _int(item.get(TALLY_PROMPT))
    values["prompt_ratio"] = _num(item.get(TALLY_RATIO))
    return SessionTally(**values)


def counts_attr(spender: str) -> str:
    return f"uq{spender}"


def spent_attrs(spender: str, tag: str) -> tuple[str, str]:
    """The tokens and the dollars of `spender`'s turns in the period `tag`."""
    return f"ut{spender}{tag}", f"uc{spender}{tag}"


def peers_attr(spender: str, day: int) -> str:
    """`spender`'s other sessions used on `day`."""
    return f"up{spender}d{day}"


def ledger_attributes(item: Mapping[str, Any], spender: str) -> list[str]:
    """The names of `spender`'s counters on a route (forget removes them)."""
    return [name for name in item if (match := _LEDGER_ATTR.match(name)) is not None and match.group(2) == spender]


def ledgers(item: Mapping[str, Any]) -> dict[str, Ledger]:
    counts: dict[str, Counts] = {}
    spent: dict[str, dict[str, list[float]]] = {}
    peers: dict[str, dict[int, frozenset[str]]] = {}
    for name, value in item.items():
        match = _LEDGER_ATTR.match(name)
        if match is None:
            continue
        kind, spender, tag = match.groups()
        if kind == "q" and tag is None:
            counts[spender] = Counts.from_list(value or [])
        elif kind == "p" and tag is not None and tag[0] == "d":
            peers.setdefault(spender, {})[int(tag[1:])] = frozenset(str(v) for v in value or ())
        elif tag is not None:
            pair = spent.setdefault(spender, {}).setdefault(tag, [0, 0.0])
            pair[0 if kind == "t" else 1] = float(value or 0)
    return {
        spender: Ledger(
            counts.get(spender, Counts()),
            {tag: (int(tokens), usd) for tag, (tokens, usd) in spent.get(spender, {}).items()},
            peers.get(spender, {}),
        )
        for spender in {*counts, *spent, *peers}
    }


def counted(found: Counted, held: Mapping[str, Ledger]) -> tuple[dict[str, Any], dict[str, set[str]], list[str]]:
    """What a message's write sets (the user's new counts), adds (the user's other sessions found
    used today) and removes (every user's counters and peers of ended periods, so a route shared
    by many users does not grow without end)."""
    gone: list[str] = []
    p = found.periods
    for spender, ledger in held.items():
        for tag in ledger.stale_tags(p):
            gone.extend(spent_attrs(spender, tag))
        gone.extend(peers_attr(spender, day) for day in ledger.stale_peer_days(p))
        if spender != found.spender and not ledger.spent and ledger.counts.month < p.month:
            gone.append(counts_attr(spender))
    added = {peers_attr(found.spender, p.day): set(found.peers)} if found.peers else {}
    return {counts_attr(found.spender): found.counts.as_list()}, added, gone


def spending(spender: str, tokens: int, usd: float, p: Periods) -> dict[str, int | float]:
    """What a turn's finishing write adds to its user's counters (today's and this month's)."""
    added: dict[str, int | float] = {}
    for tag in (p.day_tag, p.month_tag):
        token_attr, usd_attr = spent_attrs(spender, tag)
        if tokens:
            added[token_attr] = tokens
        if usd:
            added[usd_attr] = round(usd, 8)
    return added


def ranges(raw: Any) -> tuple[tuple[int, int], ...]:
    if not raw:
        return ()
    data = json.loads(raw) if isinstance(raw, str) else raw
    return tuple((int(lo), int(hi)) for lo, hi in data)


def override(raw: Any) -> ModelOverride | None:
    if not raw:
        return None
    data = json.loads(raw)
    return ModelOverride(data["model"], data.get("provider"), data.get("base_url"))


def entry(item: Mapping[str, Any], **extra: Any) -> SessionEntry:
    origin = item.get("origin")
    return SessionEntry(
        session_key=str(item["session_key"]),
        session_id=str(item["session_id"]),
        revision=int(item.get("revision") or 1),
        execution_generation=int(item.get("execution_generation") or 0),
        created_at=float(item.get("created_at") or 0),
        updated_at=float(item.get("updated_at") or 0),
        platform=str(item.get("platform") or ""),
        chat_type=str(item.get("chat_type") or "dm"),
        suspended=bool(item.get("suspended")),
        resume_pending=bool(item.get("resume_pending")),
        lease_token=item.get("lease_token"),
        lease_turn_id=item.get("lease_turn_id"),
        lease_expires_at=_num(item.get("lease_expires_at")),
        display_name=item.get("display_name"),
        origin=json.loads(origin) if origin else None,
        last_activity_at=_num(item.get("last_activity_at")),
        resume_reason=item.get("resume_reason"),
        resume_marked_at=_num(item.get("resume_marked_at")),
        failed_recoveries=int(item.get("failed_recoveries") or 0),
        expiry_finalized=bool(item.get("expiry_finalized")),
        is_fresh_reset=bool(item.get("is_fresh_reset")),
        was_auto_reset=bool(item.get("was_auto_reset")),
        auto_reset_reason=item.get("auto_reset_reason"),
        reset_had_activity=bool(item.get("reset_had_activity")),
        model_override=override(item.get("model_override")),
        lease_started_at=_num(item.get("lease_started_at")),
        stop_turn_id=item.get("stop_turn_id"),
        policy_deadline=_num(item.get("policy_deadline")),
        prev_session_id=extra.pop("prev_session_id", item.get("prev_session_id")),
        next_seq=_int(item.get("next_seq")),
        reply_seq=_int(item.get("lease_reply_seq")),
        tally=tally(item),
        hidden=ranges(item.get("hidden")),
        recent_events=tuple(str(m) for m in item.get("recent") or ()),
        queued=len(item.get("turn_queue") or ()),
        approval_pending=bool(item.get("approval")),
        ledgers=ledgers(item),
        voice=item.get("voice"),
        heard_at=_num(item.get("heard_at")),
        **extra,
    )


def ended(item: Mapping[str, Any]) -> bool:
    """The route's session ended (detached, expired) while the route still pointed at it."""
    return bool(item.get("ended"))


def control(item: Mapping[str, Any]) -> ControlState:
    session = item.get("approved_session") or {}
    handoff = item.get("handoff") or {}
    return ControlState(
        lease_token=item.get("lease_token"),
        lease_turn_id=item.get("lease_turn_id"),
        session_id=item.get("session_id"),
        reply_seq=_int(item.get("lease_reply_seq")),
        queue=tuple(QueuedInput.from_dict(q) for q in item.get("turn_queue") or ()),
        stop_turn_id=item.get("stop_turn_id"),
        approval=PendingApproval.from_dict(item["approval"]) if item.get("approval") else None,
        yolo=bool(item.get("yolo")),
        approved_always=frozenset(item.get("approved_tools") or ()),
        approved_session=(session.get("session_id"), frozenset(session.get("tools") or ())),
        handoff_from=handoff.get("from_token"),
        handoff_turn=Turn.from_json(json.loads(handoff["turn"])) if handoff.get("turn") else None,
    )


def handoff_queued(item: Mapping[str, Any]) -> tuple[QueuedInput, ...]:
    handoff = item.get("handoff") or {}
    return tuple(QueuedInput.from_dict(q) for q in json.loads(handoff.get("queued") or "[]"))


def activity(session_key: str, platform: str, chat_type: str, now: float, rules: SessionRules) -> dict[str, Any]:
    """The attributes activity at `now` sets: the clock, the route's expiry (TTL: a route idle
    `route_max_idle_days` is deleted by DynamoDB, for free) and its place in the deadline index
    (None values are removed: the route leaves the index)."""
    own = rules.for_key(session_key)
    deadline = next_deadline(own.policy_for(platform, chat_type), now, own.time_zone)
    return {
        "last_activity_at": now,
        "updated_at": now,
        "expires_at": int(now + rules.route_ttl_seconds) if rules.route_ttl_seconds else None,
        "policy_shard": shard(session_key) if deadline is not None else None,
        "policy_deadline": deadline,
    }


def heard(platform: str, now: float) -> dict[str, Any]:
    """What a person's message sets besides the activity clock, on a platform with a service
    window (domain/service_window.py): when they last wrote, in the write that begins or queues the
    message (a few bytes on WhatsApp's routes; nothing elsewhere)."""
    return {"heard_at": now} if platform in SERVICE_WINDOWS else {}


def failure(item: Mapping[str, Any], reason: str, now: float) -> dict[str, Any]:
    """A turn was cut short: resume_pending (BEHAVIOUR §5); a failure while already resume_pending
    is a failed recovery, and the MAX_FAILED_RECOVERIES-th in a row suspends the session."""
    failures = int(item.get("failed_recoveries") or 0) + 1 if item.get("resume_pending") else 0
    changes: dict[str, Any] = {
        "resume_pending": True,
        "resume_reason": reason,
        "resume_marked_at": now,
        "failed_recoveries": failures,
    }
    if failures >= MAX_FAILED_RECOVERIES:
        changes["suspended"] = True
    return changes


def compact_json(value: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in value.items() if v not in (None, False, "")}, sort_keys=True)
