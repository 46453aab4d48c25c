"""Delivery's failure policy, gone targets, unknown outcomes, events and mirroring (BEHAVIOUR §6)."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import OutcomeUnknown, PermanentError, RateLimited, TargetGone, TransientError
from hermes_gateway.services.delivery import (
    BACKOFF_CAP_SECONDS,
    MIRROR_PREFIX,
    DeliveryDeps,
    DeliveryJob,
    Undeliverable,
    deliver,
    retry_delay_seconds,
)
from tests.fakes.services import FakeDirectory, FakeEvents, FakeOutbox, FakeSender
from tests.fakes.sessions import FakeSessionStore

NOW = 1_764_400_000.0


def job(text: str = "hello", *, kind: str = "reply", mirror: bool = False, chat_id: str = "99") -> DeliveryJob:
    return DeliveryJob.from_dict(
        {
            "delivery_id": "job-1",
            "turn_id": None,
            "target": {"platform": "telegram", "chat_id": chat_id, "thread_id": None},
            "text": text,
            "kind": kind,
            "mirror": mirror,
        }
    )


def deps(sender: FakeSender, **extra: Any) -> DeliveryDeps:
    return DeliveryDeps(
        outbox=extra.pop("outbox", FakeOutbox()),
        sender_for=lambda platform, via: sender,
        now=lambda: NOW,
        events=extra.pop("events", FakeEvents()),
        targets=extra.pop("targets", FakeDirectory()),
        **extra,
    )


def test_a_refusal_is_undeliverable_and_marked_failed() -> None:
    d = deps(FakeSender(fail_on={1}, error=PermanentError("bad request")))
    with pytest.raises(Undeliverable, match="bad request"):
        deliver(job(), d)
    assert d.outbox.entries["job-1#1"].status == "failed"  # type: ignore[attr-defined]


@pytest.mark.parametrize("error", [TransientError("502"), RateLimited(3.0)])
def test_transient_failures_are_raised_for_a_retry(error: Exception) -> None:
    d = deps(FakeSender(fail_on={1}, error=error))
    with pytest.raises(type(error)):
        deliver(job(), d)


def test_a_gone_target_is_recorded_and_pushes_skip_it_until_a_send_succeeds() -> None:
    directory, events, outbox = FakeDirectory(), FakeEvents(), FakeOutbox()
    gone = FakeSender(fail_on={1}, error=TargetGone("bot was blocked"))
    result = deliver(job("reply"), deps(gone, targets=directory, events=events, outbox=outbox))
    assert result.status == "gone"
    assert outbox.entries["job-1#1"].status == "gone"
    assert directory.gone == {("telegram", "99", None): "bot was blocked"}
    assert events.emitted[-1][0] == "delivery:failed" and events.emitted[-1][1]["reason"] == "target_gone"

    # A push to it is skipped without a send attempt
    sender = FakeSender()
    pushed = deliver(
        DeliveryJob.from_dict({**_dict(job()), "delivery_id": "job-2", "kind": "push"}),
        deps(sender, targets=directory),
    )
    assert pushed.status == "skipped" and sender.attempts == 0

    # A reply (the user wrote again) is still attempted
    ok = FakeSender()
    reply = deliver(DeliveryJob.from_dict({**_dict(job()), "delivery_id": "job-4"}), deps(ok, targets=directory))
    assert reply.status == "sent" and ok.attempts == 1
    push = deliver(
        DeliveryJob.from_dict({**_dict(job()), "delivery_id": "job-5", "kind": "push"}), deps(ok, targets=directory)
    )
    assert push.status == "skipped"  # a reply does not clear it: only a push that got through does


def _dict(j: DeliveryJob) -> dict[str, Any]:
    return {
        "delivery_id": j.delivery_id,
        "target": {"platform": j.platform, "chat_id": j.chat_id, "thread_id": j.thread_id},
        "text": j.text,
        "kind": j.kind,
    }


def test_a_successful_push_clears_a_stale_gone_mark() -> None:
    directory, sender = FakeDirectory(), FakeSender()
    directory.gone[("telegram", "99", None)] = "blocked"
    directory.gone_reason = lambda *a: None  # type: ignore[method-assign]  # the mark has expired
    deliver(job(kind="push"), deps(sender, targets=directory))
    assert directory.gone == {}


def test_an_unknown_outcome_is_recorded_and_never_sent_again() -> None:
    outbox = FakeOutbox()
    sender = FakeSender(fail_on={1}, error=OutcomeUnknown("200 without a message id"))
    first = deliver(job("a"), deps(sender, outbox=outbox))
    assert first.status == "unknown" and outbox.entries["job-1#1"].status == "unknown"
    again = deliver(job("a"), deps(sender, outbox=outbox))  # a redelivery or a redrive
    assert again.status == "unknown" and sender.attempts == 1


def test_sent_and_failed_events_carry_no_message_text() -> None:
    events = FakeEvents()
    deliver(job("secret words"), deps(FakeSender(), events=events))
    ((name, detail),) = events.emitted
    assert name == "delivery:sent" and "secret words" not in str(detail)


@pytest.mark.parametrize("receives", range(1, 12))
def test_backoff_grows_with_jitter_and_is_capped(receives: int) -> None:
    low, high = retry_delay_seconds(receives, rng=lambda: 0.0), retry_delay_seconds(receives, rng=lambda: 0.999)
    assert 1 <= low <= high <= BACKOFF_CAP_SECONDS
    if receives > 1:
        assert retry_delay_seconds(receives, rng=lambda: 0.0) >= retry_delay_seconds(receives - 1, rng=lambda: 0.0)


# --- mirror ---------------------------------------------------------------------------------


def dm_session(store: FakeSessionStore, chat_id: str = "99") -> str:
    source = SessionSource("telegram", chat_id=chat_id, chat_type="dm", user_id=chat_id)
    return store.get_or_create(source, build_session_key(source), NOW).session_id


def test_a_pushed_message_is_mirrored_as_the_assistant() -> None:
    store = FakeSessionStore()
    session_id = dm_session(store)
    store.append_message(session_id, "user", "remind me", NOW)
    deliver(job("Reminder: stretch", kind="push", mirror=True), deps(FakeSender(), sessions=store))
    rows = store.transcript(session_id)
    assert [(r.role, r.content) for r in rows][-1] == ("assistant", "Reminder: stretch")


def test_after_an_assistant_row_the_mirror_is_a_marked_user_line_and_written_once() -> None:
    store = FakeSessionStore()
    session_id = dm_session(store)
    store.append_message(session_id, "assistant", "earlier answer", NOW)
    for _ in range(2):  # a redelivered job mirrors once
        deliver(job("Cron result", kind="push", mirror=True), deps(FakeSender(), sessions=store))
    rows = store.transcript(session_id)
    assert [(r.role, r.content) for r in rows][1:] == [("user", f"{MIRROR_PREFIX} Cron result")]


def test_nothing_is_mirrored_without_a_single_matching_session() -> None:
    store = FakeSessionStore()
    deliver(job("to a chat never seen", kind="push", mirror=True), deps(FakeSender(), sessions=store))
    assert store.messages == {}
