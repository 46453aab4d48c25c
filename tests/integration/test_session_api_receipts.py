"""Session API receipts on moto (the idempotency table): one claim per request id, retries get the
first receipt, concurrent retries apply once; and the handler end to end on the real stores."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from hermes_gateway.adapters.dynamo_receipts import DynamoReceipts
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.services.session_api import ApiResponse, SessionApiDeps, handle_request
from tests.fakes.services import FakeEvents, make_settings
from tests.fakes.sessions import memory_stores, seed
from tests.integration.conftest import Aws

pytestmark = pytest.mark.integration

NOW = 1_800_000_000.0
DM = SessionSource("telegram", chat_id="99", user_id="42", user_name="Al")


def test_claim_complete_replay_mismatch_and_takeover(aws: Aws) -> None:
    receipts = DynamoReceipts(aws.bindings, stale_after=30)
    first = receipts.claim("k1", "fp", NOW)
    assert first.status == "claimed" and first.token
    # A second claim while the first holds it, and one for a different request
    assert receipts.claim("k1", "fp", NOW + 1).status == "in_progress"
    assert receipts.claim("k1", "other", NOW + 1).status == "mismatch"
    # Only the holder's token completes it; then every claim finds the receipt
    assert receipts.complete("k1", "not-the-token", {"status": 200, "body": {}}, NOW) is False
    assert receipts.complete("k1", first.token, {"status": 200, "body": {"ok": True, "n": 1}}, NOW) is True
    replay = receipts.claim("k1", "fp", NOW + 2)
    assert replay.status == "done" and replay.receipt == {"status": 200, "body": {"ok": True, "n": 1}}
    # A claim whose holder died is taken over after `stale_after`; the old holder can no longer complete
    dead = receipts.claim("k2", "fp", NOW)
    assert receipts.claim("k2", "fp", NOW + 10).status == "in_progress"
    taken = receipts.claim("k2", "fp", NOW + 31)
    assert taken.status == "claimed" and taken.token != dead.token
    assert dead.token is not None and receipts.complete("k2", dead.token, {"status": 200, "body": {}}, NOW) is False
    # An abandoned claim frees the id at once
    assert taken.token is not None
    receipts.abandon("k2", taken.token)
    assert receipts.claim("k2", "fp", NOW + 32).status == "claimed"


def test_concurrent_retries_on_moto_apply_once(aws: Aws) -> None:
    # Given a branch request sent eight times at once (a client retrying over a flaky network)
    stores = memory_stores()
    key = build_session_key(DM)
    session_id = seed(stores, DM, key, "hello", now=NOW)
    deps = SessionApiDeps(
        settings=make_settings({}),
        stores=stores,
        receipts=DynamoReceipts(aws.bindings),
        events=FakeEvents(),
        sleep=time.sleep,
        in_progress_wait=10.0,
    )
    route = stores.routes.get(key)
    assert route is not None
    body = {
        "verb": "session.mutate",
        "op": "branch",
        "request_id": "retry-me",
        "session_id": session_id,
        "revision": route.revision,
        "execution_generation": route.execution_generation,
    }
    answers: list[ApiResponse] = []
    start = threading.Barrier(8)

    def send() -> None:
        start.wait()
        answers.append(handle_request(dict(body), deps))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then one child session was made, and every retry got the first call's receipt
    assert len(answers) == 8 and {a.status for a in answers} == {200}
    assert len({json.dumps(a.body, sort_keys=True) for a in answers}) == 1
    assert sum(not a.replayed for a in answers) == 1
    children = [s for s in stores.catalogue.list_sessions("agent:main") if s.parent_session_id == session_id]
    assert len(children) == 1


def _event(body: Any, *, signed: bool = True) -> dict[str, Any]:
    from hermes_local.http_front import api_gateway_v2_event

    event = api_gateway_v2_event(
        "POST", "/api/sessions", [("content-type", "application/json")], json.dumps(body).encode(), "203.0.113.9"
    )
    if signed:
        event["requestContext"]["authorizer"] = {"iam": {"userArn": "arn:aws:iam::123456789012:user/ops"}}
    return event


def test_the_handler_refuses_an_unsigned_request_and_answers_bad_json(aws: Aws) -> None:
    from hermes_gateway.resources import function
    from hermes_local.runtime import LambdaContext, load_handler_module

    handler = load_handler_module(function("session_api")).lambda_handler
    arn = "arn:aws:lambda:us-east-1:123456789012:function:s"
    context = LambdaContext("session_api", 256, arn, deadline=time.time() + 9)
    unsigned = handler(_event({"verb": "session.list"}, signed=False), context)
    assert unsigned["statusCode"] == 403
    assert json.loads(unsigned["body"])["error"]["reason"] == "permission_denied"
    bad = _event({})
    bad["body"] = "{not json"
    answer = handler(bad, context)
    assert answer["statusCode"] == 400 and json.loads(answer["body"])["error"]["reason"] == "invalid"


def test_the_handler_on_the_real_stores_applies_retries_once(aws: Aws) -> None:
    from hermes_gateway.resources import function
    from hermes_local.runtime import LambdaContext, load_handler_module

    handler = load_handler_module(function("session_api")).lambda_handler
    arn = "arn:aws:lambda:us-east-1:123456789012:function:s"

    def call(body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        answer = handler(_event(body), LambdaContext("session_api", 256, arn, deadline=time.time() + 9))
        return answer["statusCode"], json.loads(answer["body"]), answer["headers"]

    # Given a session created through the API, with a message in it
    status, created, _ = call({"verb": "session.create", "request_id": "c-1", "chat": "ops", "title": "Ops"})
    assert status == 200, created
    session_id = created["session"]["id"]
    from hermes_gateway import wiring

    stores = wiring.session_stores()
    info = stores.catalogue.get_session(session_id)
    assert info is not None
    seq = stores.leases.allocate(info.session_key, session_id, 1, NOW)
    assert seq is not None
    stores.transcript.put(session_id, TranscriptRow(seq, "user", "hello", NOW))
    snap = call({"verb": "session.resume", "session_id": session_id})[1]["session"]
    assert [m["content"] for m in snap["messages"]] == ["hello"] and snap["title"] == "Ops"
    # When eight copies of one branch request race through the handler
    body = {
        "verb": "session.mutate",
        "op": "branch",
        "request_id": "b-1",
        "session_id": session_id,
        "revision": snap["revision"],
        "execution_generation": snap["execution_generation"],
    }
    answers: list[tuple[int, dict[str, Any], dict[str, str]]] = []
    start = threading.Barrier(8)

    def send() -> None:
        start.wait()
        answers.append(call(dict(body)))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then one child exists, every copy answered with it, and all but one say they were replays
    assert {status for status, _, _ in answers} == {200}
    assert len({answer["session"]["id"] for _, answer, _ in answers}) == 1
    assert sum(1 for _, _, headers in answers if headers.get("x-hermes-replayed") == "true") == 7
    listed = call({"verb": "session.list"})[1]["sessions"]
    assert sorted(s["parent_session_id"] or "" for s in listed) == ["", session_id]
