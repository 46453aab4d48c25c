"""The `ErasureRequests` contract (domain/privacy.py): a chat's `/forget` from the ask to its end,
held to the same rules on the unit tests' in-memory DynamoDB (tests/unit/test_forget.py) and on
DynamoDB in moto (tests/integration/test_forget_on_aws.py). Each `check_*` takes a fresh store."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hermes_gateway.domain.privacy import CONFIRM_SECONDS, ErasureCounts, ErasureReport, ErasureRequest, Person

AL, BO = Person("telegram", "42", ("9042",)), Person("slack", "U43")
TARGET = {"platform": "telegram", "chat_id": "42", "thread_id": None}


def check_an_ask_is_confirmed_once_within_its_window(requests: Any) -> None:
    assert requests.confirm(AL, 1000.0) is None  # nothing asked
    asked = requests.ask(ErasureRequest.ask(AL, 1000.0, TARGET, "42"))
    assert asked.state == "asked" and requests.get(AL) == asked
    confirmed = requests.confirm(AL, 1000.0 + CONFIRM_SECONDS - 1)
    assert confirmed is not None and confirmed.state == "confirmed" and confirmed.confirmed_at == 1000.0 + 299
    assert (confirmed.person, confirmed.target, confirmed.dm_chat) == (AL, TARGET, "42")
    assert requests.confirm(AL, 1001.0) is None  # confirmed already
    # a new ask while the erasure is on changes nothing: the confirmed request is answered
    assert requests.ask(ErasureRequest.ask(AL, 1002.0, None, None)).state == "confirmed"
    assert [r.person for r in requests.confirmed(10)] == [AL]


def check_a_late_confirmation_or_a_cancel_deletes_nothing(requests: Any) -> None:
    requests.ask(ErasureRequest.ask(BO, 1000.0, None, None))
    assert requests.confirm(BO, 1000.0 + CONFIRM_SECONDS) is None  # too late
    assert requests.confirmed(10) == []
    requests.ask(ErasureRequest.ask(BO, 2000.0, None, None))  # asked again: a new window
    assert requests.cancel(BO) and requests.get(BO) is None
    assert requests.confirm(BO, 2001.0) is None and not requests.cancel(BO)


def check_progress_is_kept_between_ticks_and_the_end_removes_the_request(requests: Any) -> None:
    requests.ask(ErasureRequest.ask(AL, 1000.0, TARGET, None))
    confirmed = requests.confirm(AL, 1001.0)
    requests.ask(ErasureRequest.ask(BO, 1000.0, None, None))
    requests.confirm(BO, 1002.0)
    report = ErasureReport(ErasureCounts(sessions=2, rows=7, scanned_pages=3), cursor='{"k": 1}')
    requests.save(confirmed.progressed(report))
    (first, second) = requests.confirmed(10)  # oldest confirmation first
    assert (first.person, second.person) == (AL, BO)
    assert first.owned_done and first.cursor == '{"k": 1}' and first.counts.to_dict()["rows"] == 7
    assert requests.confirmed(1) == [first]
    requests.save(replace(first, cursor=None))
    assert requests.get(AL).cursor is None
    requests.finish(first)
    assert requests.get(AL) is None and [r.person for r in requests.confirmed(10)] == [BO]


CHECKS = [value for name, value in sorted(globals().items()) if name.startswith("check_")]
