"""`hermes-gateway outbox list|dead-letters|redrive` on moto: the dead-letter queue's depth and
kinds (never a message's text), and a redrive that hands delivery jobs to the delivery function."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from hermes_cli import main

pytestmark = pytest.mark.integration

JOB = {"delivery_id": "d-1", "target": {"platform": "telegram", "chat_id": "99"}, "text": "private words"}


@pytest.fixture
def cli_env(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr("hermes_cli.outbox.bindings_for", lambda args: aws.bindings)
    sqs = boto3.client("sqs")
    queue = aws.bindings.queue("dead-letters")
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps({"kind": "delivery", "reason": "refused: 400", "job": JOB}))
    envelope = {"event_id": "telegram:default:3", "session_key": "k", "text": "private words", "v": 1}
    sqs.send_message(
        QueueUrl=queue, MessageBody=json.dumps({"kind": "inbound", "reason": "KeyError", "message": envelope})
    )
    return aws


def test_list_and_dead_letters_show_the_queue_without_message_text(
    cli_env: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["outbox", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dead_letters"] == 2
    assert main(["outbox", "dead-letters", "--json"]) == 0
    out = capsys.readouterr().out
    listed = json.loads(out)["dead_letters"]
    assert sorted((d["kind"], d["ids"][0]) for d in listed) == [("delivery", "d-1"), ("inbound", "telegram:default:3")]
    assert "private words" not in out


def test_redrive_puts_messages_back_and_hands_jobs_to_delivery(
    cli_env: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    invoked: list[dict[str, Any]] = []
    monkeypatch.setattr(
        "hermes_gateway.adapters.aws.LambdaDeliveries.send", lambda self, body, **kw: invoked.append(body) or "r"
    )
    assert main(["outbox", "redrive"]) == 0
    assert "redrove 1 inbound message(s) and 1 delivery job(s)" in capsys.readouterr().out
    assert invoked == [{**JOB, "redriven": True}]
    (item,) = boto3.client("dynamodb").scan(TableName=cli_env.bindings.table("inbox"))["Items"]
    assert item["event_id"]["S"] == "telegram:default:3"
    assert (
        boto3.client("sqs").get_queue_attributes(
            QueueUrl=cli_env.bindings.queue("dead-letters"), AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]["ApproximateNumberOfMessages"]
        == "0"
    )
