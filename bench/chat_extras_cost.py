"""What issue 39's chat extras add to DynamoDB, per million of what they happen on, measured with
the real adapters on moto under bench/meter.py's request units (item sizes by DynamoDB's rules):

- heard_at: a WhatsApp message's route writes (the turn's begin and its finish, the messages of
  one DM session in turn) with the person's last-message time on the route, against the same run
  without it: the attribute rides on writes that happen anyway, so the difference is the bytes
  it adds, a write unit only where they cross a kilobyte;
- window_check: a push to a WhatsApp user reads their route once (services.delivery.last_heard);
- voice_command: `/voice on` writes the chat's route once (the route's read is every command's);
- quote_lookup: a WhatsApp reply naming only a message id that is not among the rows the turn
  read anyway looks for it among the newest three answers' outbox rows, one BatchGetItem of 12
  ids (the meter counts the rows it returns; a key with no row is counted at half a unit apart, in
  `quote_lookup_worst_case`).

The spoken answer's S3, Lambda and send are in media_cost's `voice_reply`; its speech API price
in media_cost's `speech`.

Usage: .venv/bin/python bench/chat_extras_cost.py [--messages N]
Writes bench/results/chat-extras-cost-latest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.meter import Meter  # noqa: E402
from bench.pricing import PRICES  # noqa: E402

RESULTS = ROOT / "bench" / "results"
REGION = "us-east-1"
PERSON = "15551234567"
NOW = 1_764_400_000.0
WRU = PRICES["per_request"]["dynamodb_write_request_unit"]
RRU = PRICES["per_request"]["dynamodb_read_request_unit"]


def _units(meter: Meter) -> tuple[float, float]:
    return sum(meter.rru.values()), sum(meter.wru.values())


def _usd_per_million(read_units: float, write_units: float, per: int) -> float:
    return round((read_units * RRU + write_units * WRU) / per * 1_000_000, 4)


def whatsapp_messages(meter: Meter, messages: int, *, heard: bool) -> dict[str, Any]:
    """`messages` WhatsApp messages in one DM session, each routed (its turn begun) and its turn
    finished, as the router and the turn's last task write the route."""
    from hermes_gateway import wiring
    from hermes_gateway.adapters import route_item
    from hermes_gateway.domain.sessions import SessionTally
    from hermes_gateway.domain.source import InboundMessage, SessionSource
    from hermes_gateway.services import lifecycle
    from hermes_gateway.services.router import Access, route_message
    from tests.fakes.access import FakePairingStore
    from tests.fakes.services import FakeDeliveryQueue, FakeEvents, FakeStarter, make_settings

    settings = make_settings({"WHATSAPP_ENABLED": "true", "GATEWAY_ALLOW_ALL_USERS": "true"})
    stores, starter = wiring.session_stores(), FakeStarter()
    access = Access(pairing=FakePairingStore(), replies=FakeDeliveryQueue(), events=FakeEvents())
    chat = f"{PERSON[:-2]}{int(heard)}{messages % 10}"  # each run its own session
    saved = route_item.SERVICE_WINDOWS
    route_item.SERVICE_WINDOWS = saved if heard else {}  # type: ignore[misc]
    meter.reset()
    try:
        for n in range(messages):
            now = NOW + n * 60
            source = SessionSource("whatsapp", chat_id=chat, user_id=chat, user_name="Wa", message_id=f"wamid.{n}")
            text = f"message {n}: what is on the plan for today, and is the queue green?"
            message = InboundMessage(source=source, text=text, event_id=f"whatsapp:{heard}:{n}", received_at=now)
            with meter.within("router"):
                route_message(message, settings=settings, stores=stores, starter=starter, access=access, now=now)
            entry = stores.routes.get(f"agent:main:whatsapp:dm:{chat}")
            assert entry is not None and entry.lease_token is not None
            successor = lifecycle.Successor(entry.session_key, entry.session_id, now + 5, False)
            with meter.within("agent"):
                lifecycle.end_turn(
                    stores.leases, stores.transcript, starter, successor, entry.lease_token,
                    tally=SessionTally(input_tokens=900, output_tokens=300), succeeded=True,
                )  # fmt: skip
    finally:
        route_item.SERVICE_WINDOWS = saved  # type: ignore[misc]
    from bench.meter import _moto_item

    routes = wiring.bindings().table("routes")
    write_units = sum(units for (_, table), units in meter.wru.items() if table == routes or table.endswith("routes"))
    stored = _moto_item(routes, {"session_key": f"agent:main:whatsapp:dm:{chat}"})
    return {
        "route_write_units_per_message": round(write_units / messages, 4),
        "route_item_bytes": stored[0] if stored else None,
        "heard_at_kept": bool(stored and "heard_at" in stored[1]),
    }


def window_check(meter: Meter) -> dict[str, Any]:
    from hermes_gateway import wiring
    from hermes_gateway.services.delivery import last_heard

    meter.reset()
    with meter.within("delivery"):
        heard = last_heard(wiring.session_stores().routes, "whatsapp", f"{PERSON[:-2]}10", "default")
    read_units, write_units = _units(meter)
    return {"found": heard is not None, "read_units": read_units, "write_units": write_units,
            "usd_per_million_pushes": _usd_per_million(read_units, write_units, 1)}  # fmt: skip


def voice_command(meter: Meter) -> dict[str, Any]:
    from hermes_gateway import wiring
    from hermes_gateway.domain.source import SessionSource
    from hermes_gateway.services.commands import CommandContext, answer_command
    from tests.fakes.services import make_settings

    chat = f"{PERSON[:-2]}10"
    source = SessionSource("whatsapp", chat_id=chat, user_id=chat)
    settings = make_settings({"GATEWAY_TTS_PROVIDER": "openai"})
    context = CommandContext(source, settings, NOW, f"agent:main:whatsapp:dm:{chat}", wiring.session_stores())
    meter.reset()
    with meter.within("router"):
        answered = answer_command("/voice on", context)
    read_units, write_units = _units(meter)
    return {
        "answer": answered.reply if answered else None,
        "requests": {op: n for (_, _, op, _), n in meter.calls.items()},
        "read_units": read_units,
        "write_units": write_units,
        "write_usd_per_million_commands": _usd_per_million(0, write_units, 1),
    }


def quote_lookup(meter: Meter) -> dict[str, Any]:
    from hermes_gateway import wiring

    outbox = wiring.outbox()
    turns = [f"turn-{n}" for n in range(3)]
    for turn in turns:  # each answer one chunk, sent: its row as deployed (a 300-character preview)
        outbox.record_claimed(
            f"{turn}#1", platform="whatsapp", chat_id=PERSON, thread_id=None, text="x" * 300, turn_id=turn,
            chunk=1, chunks=1, now=NOW,
        )  # fmt: skip
        outbox.mark(f"{turn}#1", "sent", NOW, platform_message_id=f"wamid.{turn}")
    keys = [f"{turn}{part}" for turn in turns for part in ("#1", "#2", "#v", "#m1")]
    meter.reset()
    with meter.within("agent"):
        found = outbox.get_many(keys)
    read_units, _ = _units(meter)
    worst = read_units + 0.5 * (len(keys) - len(found))
    return {"ids_asked": len(keys), "rows_found": len(found), "read_units": read_units,
            "usd_per_million_quoted_replies": _usd_per_million(read_units, 0, 1),
            "quote_lookup_worst_case": {"read_units": worst, "usd_per_million_quoted_replies":
                                        _usd_per_million(worst, 0, 1)}}  # fmt: skip


def run(messages: int) -> dict[str, Any]:
    from moto import mock_aws

    from bench.message_cost import table_specs
    from hermes_gateway import wiring
    from hermes_local.aws import configure_moto, create_resources

    started = time.perf_counter()
    for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench"),
                        ("AWS_DEFAULT_REGION", REGION), ("AWS_REGION", REGION),
                        ("POWERTOOLS_METRICS_DISABLED", "true"), ("POWERTOOLS_LOG_LEVEL", "WARNING")):  # fmt: skip
        os.environ[name] = value
    configure_moto()
    with mock_aws():
        _, env = create_resources(REGION, prefix="bench-extras")
        os.environ.update(env)
        wiring.reset()
        meter = Meter(table_specs=table_specs()).install()
        try:
            without = whatsapp_messages(meter, messages, heard=False)
            with_heard = whatsapp_messages(meter, messages, heard=True)
            window, voice, quote = window_check(meter), voice_command(meter), quote_lookup(meter)
        finally:
            meter.uninstall()
        wiring.reset()
    delta = with_heard["route_write_units_per_message"] - without["route_write_units_per_message"]
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "messages": messages,
        "heard_at": {
            "kept": with_heard["heard_at_kept"] and not without["heard_at_kept"],
            "route_item_bytes_without": without["route_item_bytes"],
            "route_item_bytes_with": with_heard["route_item_bytes"],
            "route_write_units_per_message_without": without["route_write_units_per_message"],
            "route_write_units_per_message_with": with_heard["route_write_units_per_message"],
            "usd_per_million_whatsapp_messages": round(delta * WRU * 1_000_000, 4),
        },
        "window_check": window,
        "voice_command": voice,
        "quote_lookup": quote,
        "prices_recorded": PRICES["recorded"],
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=40, help="WhatsApp messages in the heard_at runs")
    args = parser.parse_args()
    report = run(args.messages)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "chat-extras-cost-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    heard = report["heard_at"]
    print(f"heard_at: {heard['usd_per_million_whatsapp_messages']} USD per million WhatsApp messages "
          f"({heard['route_write_units_per_message_without']} -> {heard['route_write_units_per_message_with']} "
          f"route write units a message)")  # fmt: skip
    print(f"window check: {report['window_check']['usd_per_million_pushes']} USD per million WhatsApp pushes")
    print(f"/voice: {report['voice_command']['write_usd_per_million_commands']} USD per million commands (its write)")
    print(f"quote lookup: {report['quote_lookup']['usd_per_million_quoted_replies']} USD per million id-only replies")
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
