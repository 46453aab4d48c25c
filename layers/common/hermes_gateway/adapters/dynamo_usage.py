"""`UsageBook` on DynamoDB (domain/limits.py): what the router needs to sum a user's usage over
their sessions and to tell them once that a limit is reached.

The counters themselves are on the routes (`route_item`: written by writes a message and a turn
make anyway), and so is, per user, the list of their other sessions used today (`link` adds to
it). Here, on the access table, under the user's own partition `usage#<platform>#<user id>` (the
platform as the profile stores it, `telegram@coder`):

- `<session key>`: the user used that session on `day` (of `month`); put once per session and day.
  The same message then reads the partition (a consistent query, so two sessions starting at once
  find at least one of each other) and links the session with the others used today;
- `#told`: the limit `window` the user was last told about, claimed with a conditional put so
  that however many messages race past a limit, one answer is sent.

Both expire (`expires_at`, DynamoDB's TTL, free) two months after they were last written. Other
messages read nothing here: the route they read anyway names the user's other sessions of the day.
Forget (BEHAVIOUR §11) reads the partition to find the routes their counters are on.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from typing import Any

from hermes_gateway.adapters import route_item as ri
from hermes_gateway.adapters.dynamo_table import ConditionFailed, Table, Update, condition
from hermes_gateway.domain.limits import Activity, Ledger, Owner, Periods

_TOLD = "#told"  # a session key never starts with '#'
_KEEP_SECONDS = 62 * 86400


def _partition(owner: Owner) -> str:
    return f"usage#{owner.platform}#{owner.user_id}"


class DynamoUsage:
    def __init__(self, routes: Table, access: Table) -> None:
        self.routes, self.access = routes, access

    def activity(self, owner: Owner, p: Periods) -> Activity:
        days: dict[str, int] = {}
        query = condition(None, "{pk} = {:pk}", pk=_partition(owner))
        for item in self.access.query(query, consistent=True):
            if item["sk"] != _TOLD and int(item.get("month", -1)) == p.month:
                days[str(item["sk"])] = int(item["day"])
        return Activity(days)

    def note_used(self, owner: Owner, session_key: str, p: Periods) -> None:
        self.access.put(
            {
                "pk": _partition(owner),
                "sk": session_key,
                "day": p.day,
                "month": p.month,
                "expires_at": int(p.day_ends) + _KEEP_SECONDS,
            }
        )

    def link(self, session_key: str, spender: str, peer: str, p: Periods) -> None:
        update = Update().add(ri.peers_attr(spender, p.day), {peer})
        with contextlib.suppress(ConditionFailed):  # a route gone since (pruned, deleted): nothing to link
            self.routes.update(
                {"session_key": session_key}, update, condition(update, "attribute_exists({session_key})")
            )

    def ledgers(self, session_keys: Sequence[str], spender: str) -> list[Ledger]:
        if not session_keys:
            return []
        found = self.routes.batch_get([{"session_key": key} for key in session_keys])
        return [ledger for item in found if (ledger := ri.ledgers(item).get(spender)) is not None]

    def told(self, owner: Owner) -> str | None:
        found = self.access.get({"pk": _partition(owner), "sk": _TOLD}, consistent=False)
        return str(found["window"]) if found and found.get("window") else None

    def tell(self, owner: Owner, window: str, p: Periods) -> bool:
        item = {"pk": _partition(owner), "sk": _TOLD, "window": window, "expires_at": int(p.day_ends) + _KEEP_SECONDS}
        try:
            self.access.put(item, condition(None, "attribute_not_exists({pk}) OR {window} <> {:w}", w=window))
        except ConditionFailed:
            return False
        return True

    def _records(self, owner: Owner) -> list[dict[str, Any]]:
        return list(self.access.query(condition(None, "{pk} = {:pk}", pk=_partition(owner)), consistent=True))

    def held(self, owner: Owner) -> dict[str, Any]:
        records = self._records(owner)
        used = [r for r in records if r["sk"] != _TOLD]
        told = next((str(r["window"]) for r in records if r["sk"] == _TOLD and r.get("window")), None)
        counters = {}
        for record in used:
            route = self.routes.get({"session_key": record["sk"]}, consistent=False)
            ledger = ri.ledgers(route).get(owner.spender) if route else None
            if ledger is not None:
                counters[str(record["sk"])] = {
                    "messages": dataclasses.asdict(ledger.counts),
                    "tokens_and_usd": {tag: list(spent) for tag, spent in ledger.spent.items()},
                    "other_sessions_by_day": {str(day): sorted(keys) for day, keys in ledger.peers.items()},
                }
        sessions = [{"session_key": r["sk"], "day": r.get("day"), "month": r.get("month")} for r in used]
        return {"sessions_used": sessions, "told_window": told, "counters": counters}

    def forget(self, owner: Owner) -> int:
        records = self._records(owner)
        removed = 0
        for record in records:
            if record["sk"] == _TOLD:
                continue
            route = self.routes.get({"session_key": record["sk"]})
            names = ri.ledger_attributes(route, owner.spender) if route else []
            if names:
                update = Update().remove(*names)
                with contextlib.suppress(ConditionFailed):  # the route went meanwhile: its counters with it
                    self.routes.update(
                        {"session_key": record["sk"]}, update, condition(update, "attribute_exists({session_key})")
                    )
                    removed += 1
        self.access.batch_delete([{"pk": r["pk"], "sk": r["sk"]} for r in records])
        return removed + len(records)
