"""The transcript window's read (adapters.dynamo_transcript): eventually consistent when that
read already holds the turn's own message, consistent when the replica lags."""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from hermes_gateway.adapters.dynamo_transcript import DynamoTranscript


class Messages:
    """The messages table as two replicas: the consistent one has every row, the other lags by `lag` rows."""

    def __init__(self, rows: int, lag: int) -> None:
        self.items = [
            {"session_id": "s", "seq": n, "role": "user" if n % 2 else "assistant", "content": f"row {n}"}
            for n in range(1, rows + 1)
        ]
        self.lag = lag
        self.reads: list[bool] = []  # consistent, per query

    def query(self, key: Any, *, newest_first: bool, limit: int, consistent: bool) -> Iterable[dict[str, Any]]:
        self.reads.append(consistent)
        seen = self.items if consistent else self.items[: len(self.items) - self.lag]
        return list(reversed(seen))[:limit]  # (the turn's message is the newest row in these tests)


def transcript(messages: Messages) -> DynamoTranscript:
    store = DynamoTranscript.__new__(DynamoTranscript)
    store.t = SimpleNamespace(messages=messages)  # type: ignore[assignment]
    return store


def test_a_fresh_replica_answers_the_window_with_one_cheap_read() -> None:
    messages = Messages(rows=9, lag=0)
    rows = transcript(messages).window("s", upto_seq=9, limit=4)
    assert [r.seq for r in rows] == [6, 7, 8, 9]
    assert messages.reads == [False]


def test_a_replica_without_the_turns_message_is_read_again_consistently() -> None:
    messages = Messages(rows=9, lag=1)
    rows = transcript(messages).window("s", upto_seq=9, limit=4)
    assert [r.seq for r in rows] == [6, 7, 8, 9]  # the turn's own message is in its window
    assert messages.reads == [False, True]


def test_a_window_without_an_end_is_read_consistently() -> None:
    messages = Messages(rows=5, lag=0)
    assert [r.seq for r in transcript(messages).window("s", upto_seq=None, limit=10)] == [1, 2, 3, 4, 5]
    assert messages.reads == [True]
