"""The session storage ports for unit tests: the real DynamoDB adapters on an in-memory DynamoDB
(`tests/fakes/dynamo.py`), so a test exercises the same conditions, expressions and
transactions the functions run, in memory. `tests/contracts/` holds it to moto."""

from __future__ import annotations

from hermes_gateway.adapters.dynamo_table import Table
from hermes_gateway.adapters.dynamo_usage import DynamoUsage
from hermes_gateway.adapters.session_tables import SessionTables
from hermes_gateway.domain.ports import SessionStores
from hermes_gateway.domain.reset_policy import SessionRules
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.resources import ACCESS, MESSAGES, ROUTES, SESSIONS, Bindings
from hermes_gateway.wiring import stores_on
from tests.fakes.dynamo import MemoryDynamo, session_tables_client


def memory_stores(rules: SessionRules | None = None, client: MemoryDynamo | None = None) -> SessionStores:
    """Every session port on a fresh in-memory DynamoDB (or on `client`, to share one)."""
    bindings = Bindings(tables={t.name: t.name for t in (ROUTES, SESSIONS, MESSAGES)}, queues={}, state_machines={})
    return stores_on(SessionTables(bindings, "us-east-1", rules, client=client or session_tables_client()))


def seed(
    stores: SessionStores, source: SessionSource, key: str, *texts: str, now: float, roles: tuple[str, ...] = ()
) -> str:
    """A session for `key` with rows of `texts` (user, assistant, user, ... unless `roles` says),
    each at a seq its route allocated; the session id."""
    entry = stores.routes.open(source, key, now)
    for i, text in enumerate(texts):
        role = roles[i] if i < len(roles) else ("user" if i % 2 == 0 else "assistant")
        seq = stores.leases.allocate(key, entry.session_id, 1, now + i)
        assert seq is not None
        stores.transcript.put(entry.session_id, TranscriptRow(seq, role, text, now + i, sender_name=source.user_name))
    return entry.session_id


def usage_book(client: MemoryDynamo) -> DynamoUsage:
    """The usage book (domain/limits.py) on `client`'s routes and an access table (made here)."""
    if ACCESS.name not in client.tables():
        client.create_table(ACCESS.name, ACCESS.partition.name, ACCESS.sort.name if ACCESS.sort else None)
    return DynamoUsage(Table(client, ROUTES.name), Table(client, ACCESS.name))
