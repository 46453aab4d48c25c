"""Lifecycle events on the deployment's EventBridge bus (moto): a rule on the gateway's source
receives them with the event name as detail-type; a bus that refuses never fails the caller."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from hermes_gateway import wiring
from hermes_gateway.adapters.aws import EventBridgeEvents
from hermes_gateway.resources import EVENT_BUS

pytestmark = pytest.mark.integration


@pytest.fixture
def every_event(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The deployment's functions with every event on the bus (`hooks.bus_events: "*"`; none by default)."""
    monkeypatch.setenv("GATEWAY_BUS_EVENTS", "*")
    wiring.reset()
    yield aws
    wiring.reset()


def test_events_reach_a_rule_on_the_bus(every_event: Any) -> None:
    aws = every_event
    bus = aws.bindings.event_bus
    assert bus
    sqs = boto3.client("sqs")
    queue_url = sqs.create_queue(QueueName="captured")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events = boto3.client("events")
    events.put_rule(Name="all", EventBusName=bus, EventPattern=json.dumps({"source": [EVENT_BUS.source]}))
    events.put_targets(Rule="all", EventBusName=bus, Targets=[{"Id": "q", "Arn": queue_arn}])

    emitter = wiring.events()
    assert isinstance(emitter, EventBridgeEvents)
    emitter.emit("delivery:sent", {"platform": "telegram", "chunks": 2})
    emitter.flush()

    (message,) = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)["Messages"]
    event = json.loads(message["Body"])
    assert (event["source"], event["detail-type"]) == ("hermes.gateway", "delivery:sent")
    assert event["detail"] == {"platform": "telegram", "chunks": 2}


def test_a_failing_bus_never_fails_the_caller(aws: Any) -> None:
    EventBridgeEvents("no-such-bus", EVENT_BUS.source).emit("delivery:sent", {"x": 1})  # logged, not raised


def test_a_handler_returns_only_once_its_events_are_out(every_event: Any) -> None:
    import time

    published: list[dict[str, Any]] = []

    class SlowBus:
        def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            time.sleep(0.3)
            published.extend(Entries)
            return {"FailedEntryCount": 0}

    emitter = wiring.events()
    assert isinstance(emitter, EventBridgeEvents)
    emitter.__dict__["_client"] = SlowBus()

    @wiring.publishes_events
    def handler(event: Any, context: Any) -> str:
        emitter.emit("agent:end", {"status": "ok"})
        assert published == []  # published beside the work, not on its path
        return "done"

    assert handler({}, None) == "done"
    assert [e["DetailType"] for e in published] == ["agent:end"]


def test_only_the_configured_events_go_on_the_bus(aws: Any) -> None:
    published: list[str] = []

    class Bus:
        def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            published.extend(e["DetailType"] for e in Entries)
            return {"FailedEntryCount": 0}

    emitter = EventBridgeEvents("bus", EVENT_BUS.source, only=("agent:end", "delivery:*"))
    emitter.__dict__["_client"] = Bus()
    for name in ("message:pre_route", "agent:start", "agent:end", "delivery:sent", "delivery:failed"):
        emitter.emit(name, {})
    assert published == ["agent:end", "delivery:sent", "delivery:failed"]


def test_by_default_no_event_goes_on_the_bus(aws: Any) -> None:
    published: list[str] = []

    class Bus:
        def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            published.extend(e["DetailType"] for e in Entries)
            return {"FailedEntryCount": 0}

    emitter = wiring.events()
    assert isinstance(emitter, EventBridgeEvents)
    emitter.__dict__["_client"] = Bus()
    emitter.emit("agent:end", {})
    emitter.flush()
    assert published == []


def test_the_bus_event_setting_is_checked() -> None:
    from hermes_gateway.errors import ConfigError
    from hermes_gateway.settings import load_settings

    assert load_settings(env={"GATEWAY_BUS_EVENTS": "agent:end,cron:*"}).hooks.bus_events == ("agent:end", "cron:*")
    assert load_settings(env={}).hooks.bus_events == ()  # none by default: each costs
    with pytest.raises(ConfigError, match="bus_events"):
        load_settings(env={"GATEWAY_BUS_EVENTS": "agent end"})
