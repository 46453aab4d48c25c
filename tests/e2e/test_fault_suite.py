"""The fault run of bench/faults.py at its reduced size, in the suite: local mode under concurrent
chats with faults injected at every adapter (DynamoDB and SQS throttling, Step Functions throttling,
model and platform 429/500/timeouts, turn tasks crashing after their work, duplicate webhooks and
duplicates reaching the router and the delivery workers out of order), the chats split between two
bots of one deployment (its own and the named profile `coder`, whose update ids overlap its own).
No reply is duplicated, none is lost, none overtakes an earlier one in its chat, none comes from the
other bot; what is dead-lettered says why; no log line carries a secret (either bot's) or a message's
text. Below it, one minimal reproduction per bug the run found.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from bench.faults import SIZES, run
from hermes_gateway.services.delivery import MARK_ATTEMPTS
from hermes_gateway.services.turn import APOLOGY, STEPS
from tests.e2e.conftest import Client, telegram_update
from tests.fakes.telegram_server import FakeTelegram, too_many_requests

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return run(SIZES["ci"], seed=11)


def test_every_accepted_message_is_answered_or_dead_lettered(report: dict[str, Any]) -> None:
    profile = SIZES["ci"]
    assert report["quiescent"], "the run did not settle"
    assert report["received"] == profile.sessions * profile.messages and report["not_acknowledged"] == 0
    # Duplicates started no second turn (queued messages may share one)
    assert 0 < report["turns"] <= report["received"]
    # (a lost message usually waits behind a lease still held: the report says whose, and how its turn went)
    assert report["lost"] == 0, (report["lost_messages"], report["leases_held"])
    assert report["unexpected_replies"] == []


def test_each_bot_answers_its_own_chats(report: dict[str, Any]) -> None:
    # Both bots took messages (numbered alike: none was dropped as the other bot's duplicate) and
    # answered, and every reply reached its chat through the bot the chat talks to
    profile = SIZES["ci"]
    coder = len(range(1, profile.sessions, profile.coder_every)) * profile.messages
    assert report["received_by_bot"] == {"coder": coder, "main": report["received"] - coder}
    assert set(report["replies_by_bot"]) == {"coder", "main"} and min(report["replies_by_bot"].values()) > 0
    assert report["wrong_bot"] == 0, report["wrong_bot_replies"]


def test_dead_letters_are_the_refused_sends_with_their_reason(report: dict[str, Any]) -> None:
    # Nothing else reaches the dead letters: no message exhausts its retries under these faults
    for entry in report["dlq"]:
        assert entry["kind"] == "delivery" and entry["reason"].startswith("TelegramRejected"), entry


def test_every_kind_of_fault_was_injected(report: dict[str, Any]) -> None:
    kinds = {name.split(":")[0] for name in report["faults_injected"]}
    assert {"dynamodb_throttled", "lambda_throttled", "provider", "platform", "crash_after_work"} <= kinds
    assert {"webhook_sent_twice_at_once", "stream_record_delivered_twice", "delivery_invoked_twice"} <= kinds
    # the inbox write itself was throttled (a 503 the platform retried) and answered in the end
    assert any(name.startswith("dynamodb_throttled:ingress:PutItem:inbox") for name in report["faults_injected"])


def test_no_secret_or_message_text_reaches_a_log_line(report: dict[str, Any]) -> None:
    scan = report["log_scan"]
    assert scan["log_lines"] > 0  # DEBUG and up, every function
    assert {"TELEGRAM_BOT_TOKEN__CODER", "TELEGRAM_WEBHOOK_SECRET__CODER"} <= set(scan["secrets_checked"])
    assert scan["secrets_found"] == []
    assert scan["message_texts_found"] == 0


def test_no_reply_is_duplicated_reordered_or_contradicted(report: dict[str, Any]) -> None:
    # A duplicate is allowed only where the platform posted a send after the sender had timed out
    # on it (a retried timeout, BEHAVIOUR §6): each such reply is one no outbox row holds, made for
    # a timed-out attempt at that very text
    assert report["duplicate_replies_unexplained"] == 0, report["duplicated"]
    late = [post for entry in report["duplicated"] for post in entry["sent_by"] if post["late_answer"]]
    assert report["duplicates_after_a_late_platform_answer"] <= len(late)
    assert len(late) <= report["platform_sends"]["timed_out_but_posted"] <= report["platform_sends"]["timed_out"]
    if report["order_violations"]:  # the whole evidence (an assertion's message is cut short)
        pytest.fail(
            "replies out of order: "
            + json.dumps(
                {k: report[k] for k in ("out_of_order", "reply_order", "handed_to_delivery_function")}, default=str
            )
        )
    assert report["answered_and_apologized"] == []
    assert report["wrong_bot"] == 0, report["wrong_bot_replies"]


# --- the bugs the run found, one minimal reproduction each ---------------------------------


@contextlib.contextmanager
def throttled(should: Callable[[str, str, dict[str, Any]], bool], times: int = 1) -> Iterator[list[str]]:
    """The first `times` AWS calls for which `should(service, operation, params)` holds raise
    DynamoDB's throttling error, as a call whose SDK retries ran out would; yields what was throttled."""
    from botocore.client import BaseClient
    from botocore.exceptions import ClientError

    original = BaseClient._make_api_call
    done: list[str] = []
    lock = threading.Lock()

    def make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
        with lock:
            hit = len(done) < times and should(client.meta.service_model.service_name, operation, params)
            if hit:
                done.append(operation)
        if hit:
            error = {"Code": "ProvisionedThroughputExceededException", "Message": "Rate of requests exceeds"}
            raise ClientError({"Error": error}, operation)  # type: ignore[typeddict-item]
        return original(client, operation, params)

    BaseClient._make_api_call = make_api_call  # type: ignore[method-assign]
    try:
        yield done
    finally:
        BaseClient._make_api_call = original  # type: ignore[method-assign]


def _values(params: dict[str, Any]) -> set[str]:
    return {v.get("S", "") for v in (params.get("ExpressionAttributeValues") or {}).values() if isinstance(v, dict)}


def _wait(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


def _marks_sent(service: str, operation: str, params: dict[str, Any]) -> bool:
    """The outbox write that records a chunk as sent."""
    outbox = os.environ["HERMES_OUTBOX_TABLE"]
    return operation == "UpdateItem" and params.get("TableName") == outbox and "sent" in _values(params)


def _telegram_gateway(start_gateway: Callable[..., Client], fake: FakeTelegram) -> Client:
    return start_gateway(TELEGRAM_BOT_TOKEN=fake.token, TELEGRAM_API_BASE_URL=fake.base_url)


def test_a_throttled_sent_mark_is_retried_and_the_reply_sent_once(
    start_gateway: Callable[..., Client], fake_telegram: FakeTelegram
) -> None:
    # Was a bug: the failed mark left the row 'sending', and once the claim went stale it was resent
    client = _telegram_gateway(start_gateway, fake_telegram)
    with throttled(_marks_sent) as hits:
        assert client.telegram(telegram_update(1, "hello"))[0] == 200
        assert _wait(lambda: bool(client.outbox()) and client.outbox()[0]["status"] == "sent", 15)
    assert hits == ["UpdateItem"]
    assert [m["text"] for m in fake_telegram.sent] == ["Echo: hello"]


def test_a_send_whose_mark_never_lands_is_settled_unknown_not_resent(
    start_gateway: Callable[..., Client], fake_telegram: FakeTelegram
) -> None:
    client = _telegram_gateway(start_gateway, fake_telegram)
    with throttled(_marks_sent, times=MARK_ATTEMPTS) as hits:  # every in-process try of the mark
        assert client.telegram(telegram_update(1, "hello"))[0] == 200
        assert _wait(lambda: len(hits) == MARK_ATTEMPTS, 15)
        assert len(fake_telegram.sent) == 1 and client.outbox()[0]["status"] == "sending"
    # A minute passes (the turn keeps trying its delivery, finding the claim held): the claim is stale
    [row] = client.outbox()
    boto3.client("dynamodb").update_item(
        TableName=os.environ["HERMES_OUTBOX_TABLE"],
        Key={"delivery_id": {"S": row["delivery_id"]}},
        UpdateExpression="SET updated_at = :then",
        ExpressionAttributeValues={":then": {"N": str(time.time() - 120)}},
    )
    assert _wait(lambda: client.outbox()[0]["status"] != "sending" and not client.gateway.busy(), 30)
    assert client.outbox()[0]["status"] == "unknown"
    assert [m["text"] for m in fake_telegram.sent] == ["Echo: hello"]  # a gap the outbox shows, not a duplicate


def test_a_failed_send_whose_failed_mark_was_throttled_is_sent_later(
    start_gateway: Callable[..., Client], fake_telegram: FakeTelegram
) -> None:
    # Was a bug: the row stayed 'sending', was settled 'unknown' once stale, and the reply was lost
    client = _telegram_gateway(start_gateway, fake_telegram)
    fake_telegram.answer_next(500, {"ok": False, "error_code": 500, "description": "Internal Server Error"})
    outbox = os.environ["HERMES_OUTBOX_TABLE"]

    def marks_failed(service: str, operation: str, params: dict[str, Any]) -> bool:
        values = _values(params)  # the mark, not the claim (whose condition names 'failed' too)
        marks = "failed" in values and "sending" not in values
        return operation == "UpdateItem" and params.get("TableName") == outbox and marks

    with throttled(marks_failed, times=MARK_ATTEMPTS) as hits:  # every in-process try of the mark
        assert client.telegram(telegram_update(1, "hello"))[0] == 200
        assert _wait(lambda: len(hits) == MARK_ATTEMPTS, 15)
        # never settled `unknown`: still claimed, or already taken back by the Deliver task (the
        # Respond task's send failed, and the Deliver task runs in this process at once)
        assert client.outbox()[0]["status"] in ("sending", "sent")
    # The job comes back to an instance that knows the send failed: sent once
    assert _wait(lambda: client.outbox()[0]["status"] == "sent" and not client.gateway.busy(), 30), client.outbox()[0]
    assert [m["text"] for m in fake_telegram.sent] == ["Echo: hello"]


def test_a_reply_retried_after_a_rate_limit_is_not_overtaken(
    start_gateway: Callable[..., Client], fake_telegram: FakeTelegram
) -> None:
    # Was a bug: replies were not ordered per chat, and the next turn's reply went first
    client = _telegram_gateway(start_gateway, fake_telegram)
    fake_telegram.answer_next(429, too_many_requests(3))  # the first reply waits 4 s for its next try
    assert client.telegram(telegram_update(1, "one"))[0] == 200
    assert _wait(lambda: bool(client.outbox()) and client.outbox()[0]["status"] == "failed", 15)
    assert client.telegram(telegram_update(2, "two"))[0] == 200  # it waits: "one"'s turn is still delivering

    def answers() -> list[str]:  # the busy notice "two" got meanwhile is not an answer
        return [m["text"] for m in fake_telegram.sent if m["text"].startswith("Echo:")]

    assert _wait(lambda: len(answers()) == 2, 30)
    assert answers() == ["Echo: one", "Echo: two"]


def _crash_once(client: Client, step: str, error: str) -> list[str]:
    """The agent's `step` task fails once after doing its work, with an error named `error`."""
    assert step in STEPS, step  # a name the agent has: a crash that never happens proves nothing
    functions = client.gateway.functions
    handler, crashed = functions.handlers["agent"], list[str]()

    def agent(event: dict[str, Any], context: Any) -> Any:
        result = handler(event, context)
        if event.get("step") == step and not crashed:  # after its work
            crashed.append(step)
            raise type(error, (Exception,), {})("the task failed after its work")
        return result

    functions.handlers["agent"] = agent
    return crashed


def test_a_crash_after_the_respond_task_sent_and_finished_adds_no_apology(client: Client) -> None:
    # Was a bug: the Fail state found no 'delivery' in the turn state and queued the apology too.
    # The Respond task sends the answer and finishes the turn itself; it dies after: Fail finds the
    # answer, hands it on under its own delivery id (already sent: nothing goes out) and no apology
    crashed = _crash_once(client, "respond", "Sandbox.Timedout")
    assert client.telegram(telegram_update(1, "hello"))[0] == 200
    assert _wait(lambda: len(client.outbox()) >= 1 and not client.gateway.busy(), 15)
    time.sleep(1.0)  # the Fail state's apology, if any, is queued within this
    assert crashed == ["respond"]
    assert [r["text"] for r in client.outbox()] == ["Echo: hello"]


def test_a_retried_task_that_crashed_after_its_work_answers_once(client: Client) -> None:
    # Step Functions retries Lambda.ServiceException: Respond (which sent the answer and finished
    # the turn) runs twice, the reply goes out once, and the session takes its next message
    crashed = _crash_once(client, "respond", "Lambda.ServiceException")
    assert client.telegram(telegram_update(1, "hello"))[0] == 200
    assert _wait(lambda: len(client.outbox()) >= 1 and not client.gateway.busy(), 15)
    time.sleep(1.0)
    assert crashed == ["respond"]
    assert [r["text"] for r in client.outbox()] == ["Echo: hello"]
    assert client.telegram(telegram_update(2, "again"))[0] == 200
    assert _wait(lambda: len(client.outbox()) >= 2 and not client.gateway.busy(), 15)
    assert [r["text"] for r in client.outbox()] == ["Echo: hello", "Echo: again"]


def test_a_throttled_read_in_a_turn_is_retried_not_apologized_for(client: Client) -> None:
    # Was a bug: a throttled read in the turn's first task failed the turn, and the user got the apology
    functions = client.gateway.functions
    handler, responding = functions.handlers["agent"], threading.local()

    def agent(event: dict[str, Any], context: Any) -> Any:
        responding.on = event.get("step") == "respond"
        try:
            return handler(event, context)
        finally:
            responding.on = False

    def first_read(service: str, operation: str, params: dict[str, Any]) -> bool:
        return getattr(responding, "on", False) and operation in ("GetItem", "Query", "BatchGetItem")

    functions.handlers["agent"] = agent
    with throttled(first_read) as hits:
        assert client.telegram(telegram_update(1, "hello"))[0] == 200
        rows = client.wait_outbox(1)
    assert len(hits) == 1
    assert [r["text"] for r in rows] == ["Echo: hello"]
    assert rows[0]["text"] != APOLOGY
