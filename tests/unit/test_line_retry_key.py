"""LINE pushes carry an X-Line-Retry-Key derived from the chunk's outbox row: a push retried after
a timeout that LINE had in fact accepted is answered 409 with the first push's message id, and is
posted once. Replies carry none (LINE refuses a retry key there)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from hermes_gateway.errors import OutcomeUnknown, PermanentError, TransientError
from hermes_gateway.platforms.base import Target
from hermes_gateway.platforms.line import RETRY_KEY_HEADER, LineSender, retry_key
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, deliver
from tests.fakes.line_server import FakeLine
from tests.fakes.services import FakeOutbox

NOW = 1_764_400_000.0
ALICE = "U4af4980629"


@pytest.fixture
def fake_line() -> Iterator[FakeLine]:
    with FakeLine() as fake:
        yield fake


def sender(fake: FakeLine, timeout: float = 2.0) -> LineSender:
    return LineSender(fake.base_url, fake.token, clock=lambda: NOW + 5, timeout=timeout)


def push(delivery_id: str | None = "reply-1#1") -> Target:
    return Target("line", ALICE, delivery_id=delivery_id)


def test_the_retry_key_is_a_uuid_of_the_chunk_the_same_on_every_try() -> None:
    key = retry_key("reply-1#1")
    assert str(uuid.UUID(key)) == key
    assert retry_key("reply-1#1") == key and retry_key("reply-1#2") != key and retry_key("reply-2#1") != key


def test_a_push_carries_its_chunks_retry_key(fake_line: FakeLine) -> None:
    assert sender(fake_line).send(push(), "hi") == "100001"
    assert fake_line.requests[0].headers[RETRY_KEY_HEADER.lower()] == retry_key("reply-1#1")


def test_a_reply_carries_no_retry_key(fake_line: FakeLine) -> None:
    token = fake_line.issue_reply_token()
    target = Target("line", ALICE, context={"reply_token": token, "received_at": repr(NOW)}, delivery_id="r#1")
    assert sender(fake_line).send(target, "hi") == "100001"
    assert fake_line.paths() == ["/v2/bot/message/reply"]
    assert RETRY_KEY_HEADER.lower() not in fake_line.requests[0].headers


def test_a_push_accepted_before_is_not_posted_again_and_keeps_its_id(fake_line: FakeLine) -> None:
    first = sender(fake_line).send(push(), "hi")
    again = sender(fake_line).send(push(), "hi")  # another instance retrying the same chunk
    assert (first, again) == ("100001", "100001")
    assert len(fake_line.sent) == 1


def test_a_409_without_a_message_id_is_an_unknown_outcome(fake_line: FakeLine) -> None:
    fake_line.answer_next(409, {"message": "The retry key is already accepted"})
    with pytest.raises(OutcomeUnknown, match="409"):
        sender(fake_line).send(push(), "hi")


def test_a_409_to_a_push_without_a_retry_key_is_refused_as_before(fake_line: FakeLine) -> None:
    fake_line.answer_next(409, {"message": "Conflict"})
    with pytest.raises(PermanentError, match="409"):
        sender(fake_line).send(push(None), "hi")


def test_a_delivery_retried_after_a_timeout_posts_the_push_once(fake_line: FakeLine) -> None:
    # Given LINE accepts the push but its answer comes after the sender gave up
    fake_line.push_answer_delay = 0.5
    slow = sender(fake_line, timeout=0.2)
    outbox = FakeOutbox()
    clock = iter(range(10_000))
    deps = DeliveryDeps(outbox=outbox, sender_for=lambda platform, via: slow, now=lambda: NOW + next(clock))
    job = DeliveryJob.from_dict(
        {"delivery_id": "reply-1", "text": "hi", "target": {"platform": "line", "chat_id": ALICE}}
    )
    with pytest.raises(TransientError):
        deliver(job, deps)
    # When the job is retried (the answer now comes in time)
    fake_line.push_answer_delay = 0.0
    result = deliver(job, deps)
    # Then the message was posted once, and the outbox holds its id
    assert result.status == "sent"
    assert len(fake_line.sent) == 1
    assert outbox.entries["reply-1#1"].platform_message_id == "100001"
    assert [r.headers[RETRY_KEY_HEADER.lower()] for r in fake_line.requests] == [retry_key("reply-1#1")] * 2
