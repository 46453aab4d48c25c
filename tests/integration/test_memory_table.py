"""The memory notes on DynamoDB (moto): the NoteStore rules, the limit under concurrent adds,
throttling as TransientError, and the same results as the in-memory fake."""

from __future__ import annotations

import threading
from typing import Any

import botocore.client
import pytest
from botocore.exceptions import ClientError

from hermes_gateway.adapters.dynamo_memory import DynamoNoteStore
from hermes_gateway.errors import TransientError
from hermes_gateway.tools.memory import NotebookFull, NoteLimits, run_memory
from tests.fakes.memory_notes import FakeNoteStore
from tests.integration.conftest import REGION, Aws

SCOPE = "default#0123456789ab"
T0 = 1_795_000_000.0


@pytest.fixture
def store(aws: Aws) -> DynamoNoteStore:
    return DynamoNoteStore(aws.bindings, REGION)


def test_add_list_replace_remove(store: DynamoNoteStore) -> None:
    first = store.add_note(SCOPE, "n1", "likes tea", T0, max_notes=5)
    store.add_note(SCOPE, "n0", "has a cat", T0 + 1, max_notes=5)

    assert [(n.note_id, n.text) for n in store.list_notes(SCOPE)] == [("n1", "likes tea"), ("n0", "has a cat")]
    assert first.created_at == T0

    replaced = store.replace_note(SCOPE, "n1", "likes coffee", T0 + 2)
    assert replaced is not None
    assert (replaced.text, replaced.created_at, replaced.updated_at) == ("likes coffee", T0, T0 + 2)
    assert store.replace_note(SCOPE, "missing", "x", T0) is None

    assert store.remove_note(SCOPE, "n1") is True
    assert store.remove_note(SCOPE, "n1") is False
    assert [n.note_id for n in store.list_notes(SCOPE)] == ["n0"]
    assert store.list_notes("default#other") == []


def test_the_same_id_added_again_is_a_no_op(store: DynamoNoteStore) -> None:
    store.add_note(SCOPE, "n1", "first", T0, max_notes=2)
    again = store.add_note(SCOPE, "n1", "first", T0 + 5, max_notes=2)

    assert (again.text, again.created_at) == ("first", T0)
    # the repeat was not counted: one more note still fits
    store.add_note(SCOPE, "n2", "second", T0, max_notes=2)
    with pytest.raises(NotebookFull):
        store.add_note(SCOPE, "n3", "third", T0, max_notes=2)


def test_a_removed_note_frees_its_place(store: DynamoNoteStore) -> None:
    store.add_note(SCOPE, "n1", "a", T0, max_notes=1)
    with pytest.raises(NotebookFull):
        store.add_note(SCOPE, "n2", "b", T0, max_notes=1)
    store.remove_note(SCOPE, "n1")
    store.add_note(SCOPE, "n2", "b", T0, max_notes=1)
    assert [n.note_id for n in store.list_notes(SCOPE)] == ["n2"]


def test_concurrent_adds_never_pass_the_limit(store: DynamoNoteStore) -> None:
    # Given 12 turns of one user adding a note at the same moment, with room for 5
    start = threading.Barrier(12)
    outcomes: list[str] = []

    def add(i: int) -> None:
        start.wait()
        try:
            store.add_note(SCOPE, f"n{i}", f"note {i}", T0, max_notes=5)
            outcomes.append("added")
        except NotebookFull:
            outcomes.append("full")
        except TransientError:
            outcomes.append("contended")

    threads = [threading.Thread(target=add, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    notes = store.list_notes(SCOPE)
    assert len(notes) == outcomes.count("added") <= 5
    assert store.model.get(SCOPE, "#count").note_count == len(notes)


def test_the_same_memory_actions_give_the_same_results_as_the_fake(store: DynamoNoteStore) -> None:
    limits = NoteLimits(max_notes=2, max_note_chars=100)

    def play(target: Any) -> list[str]:
        seen = []
        for i, arguments in enumerate(
            [
                {"action": "add", "text": "a"},
                {"action": "add", "text": "b"},
                {"action": "list"},
                {"action": "replace", "id": "n-0", "text": "a2"},
                {"action": "remove", "id": "n-1"},
                {"action": "add", "text": "c"},
                {"action": "list"},
            ]
        ):
            seen.append(run_memory(target, SCOPE, arguments, note_id=f"n-{i}", now=T0 + i, limits=limits))
        return seen

    assert play(store) == play(FakeNoteStore())


@pytest.mark.parametrize(
    ("operation", "error"),
    [
        ("Query", {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}),
        ("UpdateItem", {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}),
        (
            "TransactWriteItems",
            {
                "Error": {"Code": "TransactionCanceledException", "Message": "throttled"},
                "CancellationReasons": [{"Code": "ThrottlingError"}, {"Code": "None"}],
            },
        ),
    ],
)
def test_throttling_is_transient(
    store: DynamoNoteStore, monkeypatch: pytest.MonkeyPatch, operation: str, error: dict[str, Any]
) -> None:
    store.add_note(SCOPE, "n1", "a", T0, max_notes=5)
    real_call = botocore.client.BaseClient._make_api_call

    def throttled(client: Any, name: str, params: dict[str, Any]) -> Any:
        if name == operation:
            raise ClientError(error, name)  # type: ignore[arg-type]
        return real_call(client, name, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", throttled)
    # the first call that makes the throttled operation raises (Query: list, UpdateItem: replace, …)
    with pytest.raises(TransientError):
        store.list_notes(SCOPE)
        store.replace_note(SCOPE, "n1", "b", T0)
        store.add_note(SCOPE, "n2", "c", T0, max_notes=5)
