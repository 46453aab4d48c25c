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
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

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
