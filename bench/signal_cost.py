"""Cost of a Signal message: the message's path as on every platform, plus the forwarder's mailbox.

Local mode in-process with Signal enabled and the echo provider (answers made 1-2 KB long, as
bench/message_cost.py's), the meter of bench/message_cost.py installed, and the reference
forwarder (relays/signal-cli/forwarder.py) doing what it does deployed: it posts each message
signed, collects the mailbox in its own loop (every second while a reply is awaited, the report
of a sent letter in the next call), and "sends" each letter through a stand-in for signal-cli that
answers with a timestamp at once. Its calls are counted as the webhook requests they are.

- `messages`: one conversation at a time (a DM, then a group, in turn), each message posted once
  the last reply was reported: the sparse traffic a personal bot sees, where no collection serves
  two replies. Priced per million messages, with `http_api` (API Gateway) and with
  `function_url` (compare bench/ledger.py's Telegram DM message).
- `empty_polls`: collections of an empty mailbox, alone: what the forwarder costs while nothing
  happens (one every `POLL_SECONDS`, 30 by default), priced per million calls and per month.

Usage: .venv/bin/python bench/signal_cost.py [--messages N] [--solo N] [--polls N] [--quick]
Writes bench/results/signal-cost-latest.json.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.message_cost import (  # noqa: E402
    REPLY_BYTES,
    RESULTS,
    _units,
    by_service_operation,
    local_gateway,
    outbox,
    reply_size,
    table_specs,
)
from bench.meter import Meter, counted_logs  # noqa: E402
from bench.pricing import PRICES, price, profile  # noqa: E402
from tests.fakes.signal_cli import load_forwarder  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "signal"
ACCOUNT = "+15555550100"
SECONDS_PER_MONTH = 30 * 24 * 3600
# Made per run, never a fixed value on disk
SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


class StandInSignalCli:
    """signal-cli as the forwarder sees it: every send succeeds at once with a new timestamp."""

    def __init__(self, outcome: Any) -> None:
        self._outcome = outcome
        self._next = int(time.time() * 1000)
        self.sent = 0

    def send(self, letter: dict[str, Any], files: list[Any]) -> Any:
        self._next += 1
        self.sent += 1
        return self._outcome("sent", self._next)

    def attachment(self, attachment_id: str) -> bytes:
        raise AssertionError("the bench's messages carry no files")

    def typing(self, kind: str, chat: str) -> None:
        """Shown by signal-cli itself: no request to the gateway."""


def notification(n: int) -> dict[str, Any]:
    """The n-th message: the fixtures' DM and group text in turn, from four people, sent now (each
    conversation goes on in its session, as message_cost's do)."""
    name = "receive_dm_text.json" if n % 2 else "receive_group_text.json"
    found = copy.deepcopy(json.loads((FIXTURES / name).read_text()))
    envelope = found["params"]["envelope"]
    now = int(time.time() * 1000) + n
    number, uuid = f"+1555700{n % 4:04d}", f"b2c3d4e5-f6a7-4b8c-9d0e-{n % 4:012d}"
    envelope.update(timestamp=now, source=number, sourceNumber=number, sourceUuid=uuid)
    envelope["dataMessage"].update(timestamp=now, message=f"question number {n}: what should I do next?")
    return found


class Counting:
    """The forwarder's gateway client, counting its requests by call (each is a webhook request)."""

    def __init__(self, gateway: Any) -> None:
        self._gateway = gateway
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def request(self, call: str, payload: dict[str, Any], *, msg_id: str) -> dict[str, Any]:
        with self._lock:
            self.calls[call or "message"] = self.calls.get(call or "message", 0) + 1
        answer: dict[str, Any] = self._gateway.request(call, payload, msg_id=msg_id)
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._gateway, name)


def run(messages: int, solo: int, polls: int, state: Path) -> dict[str, Any]:
    module = load_forwarder("signal_cli_forwarder_bench")
    meter = Meter(reply_bytes=reply_size(*REPLY_BYTES))
    meter.install()
    try:
        with local_gateway({"SIGNAL_RELAY_SECRET": SECRET, "SIGNAL_ACCOUNT": ACCOUNT}) as (gateway, _):
            meter.table_specs = table_specs()
            config = module.Config(
                relay_url=gateway.url + "/webhooks/signal", secret=SECRET, account=ACCOUNT, state_dir=state,
                signal_cli="tcp://127.0.0.1:1", typing=False,
            )  # fmt: skip
            forwarder = module.Forwarder(
                config, module.Gateway(config.relay_url, SECRET), StandInSignalCli(module.Outcome)
            )
            counting = Counting(forwarder.gateway)
            forwarder.gateway = counting
            stop = threading.Event()
            loop = threading.Thread(target=forwarder.collect_forever, args=(stop,), daemon=True)
            loop.start()
            try:
                converse(forwarder, 1)  # warm: clients, imports, the first session
                alone = []
                for n in range(solo):
                    meter.wait_idle()
                    meter.reset()
                    converse(forwarder, 2 + n)
                    meter.wait_idle()
                    alone.extend(meter.invocations)
                meter.wait_idle()
                meter.reset()
                counting.calls.clear()
                started = time.perf_counter()
                with counted_logs() as logs:
                    for n in range(messages):
                        converse(forwarder, 1000 + n)
                    meter.wait_idle()
                seconds = time.perf_counter() - started
                calls = dict(counting.calls)
                requests = sum(calls.values())
                priced = price(meter, messages, requests, logs.bytes, len(logs.metrics), profile(alone))
                via_url = price(
                    meter, messages, requests, logs.bytes, len(logs.metrics), profile(alone), endpoint="function_url"
                )
                aws_calls = by_service_operation(meter, messages)
                units = _units(meter, messages)
                stop.set()
                forwarder.wake.set()
                loop.join(timeout=10)
                idle = empty_polls(meter, counting, polls)
            finally:
                stop.set()
                forwarder.wake.set()
            rows = [r for r in outbox() if r["platform"] == "signal"]
    finally:
        meter.uninstall()
    if not rows or any(r["status"] != "sent" for r in rows):
        raise RuntimeError(f"Signal replies not all sent: {sorted({r['status'] for r in rows})}")
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "messages": messages,
        "reply_bytes": list(REPLY_BYTES),
        "seconds": round(seconds, 1),
        "webhook_requests_per_message": {call: round(n / messages, 3) for call, n in sorted(calls.items())},
        "usd_per_million_messages": priced["cost_per_million_usd"],
        "usd_per_million_messages_function_url": via_url["cost_per_million_usd"],
        "cost_by_service": priced["cost_by_service"],
        "cost_by_service_function_url": via_url["cost_by_service"],
        "aws_requests_per_message": aws_calls,
        "dynamodb_units_per_message": units,
        "per_message": priced["per_message"],
        "lambda_by_function": priced["lambda_by_function"],
        "outbox_rows_sent": len(rows),
        "empty_polls": idle,
        "prices_recorded": PRICES["recorded"],
        "failed_invocations": meter.failed_invocations,
    }


def converse(forwarder: Any, n: int) -> None:
    """One message posted as the forwarder posts it, and its reply collected, sent and reported."""
    before = forwarder.signal.sent
    if not forwarder.received(notification(n)):
        raise RuntimeError("the gateway did not take a message")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with forwarder._lock:
            settled = not forwarder.awaited and not forwarder.reports
        if settled and forwarder.signal.sent > before:
            return
        time.sleep(0.02)
    raise RuntimeError("no reply within a minute")


def empty_polls(meter: Meter, counting: Counting, polls: int) -> dict[str, Any]:
    """`polls` collections of an empty mailbox, metered alone: the forwarder's idle cost."""
    alone = []
    for _ in range(3):  # a profile of the ingress's empty collection, nothing else running
        meter.wait_idle()
        meter.reset()
        counting.request("outbox", {"reports": [], "limit": 10}, msg_id=f"msg_idle_{time.time_ns()}")
        meter.wait_idle()
        alone.extend(meter.invocations)
    meter.wait_idle()
    meter.reset()
    with counted_logs() as logs:
        for _ in range(polls):
            counting.request("outbox", {"reports": [], "limit": 10}, msg_id=f"msg_idle_{time.time_ns()}")
        meter.wait_idle()
    by_endpoint = {}
    for endpoint in ("http_api", "function_url"):
        per_million = price(meter, polls, polls, logs.bytes, len(logs.metrics), profile(alone), endpoint=endpoint)
        usd = per_million["cost_per_million_usd"]
        by_endpoint[endpoint] = {
            "usd_per_million_polls": usd,
            "cost_by_service": per_million["cost_by_service"],
            "usd_per_month_at_30_s": round(usd * SECONDS_PER_MONTH / 30 / 1e6, 3),
        }
    calls = by_service_operation(meter, polls)
    return {"polls": polls, "aws_requests_per_poll": calls, "log_bytes_per_poll": round(logs.bytes / polls, 1),
            **by_endpoint}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--solo", type=int, default=10, help="conversations run alone first (the Lambda profile)")
    parser.add_argument("--polls", type=int, default=100, help="empty collections metered for the idle cost")
    parser.add_argument("--quick", action="store_true", help="16 messages, 4 alone, 30 empty polls")
    args = parser.parse_args()
    messages, solo, polls = (16, 4, 30) if args.quick else (args.messages, args.solo, args.polls)
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="signal-bench-") as state:
        report = run(messages, solo, polls, Path(state))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "signal-cost-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    shown = ("usd_per_million_messages", "usd_per_million_messages_function_url", "webhook_requests_per_message")
    print(json.dumps({k: report[k] for k in shown}, indent=2))
    print(json.dumps({k: report["empty_polls"][k] for k in ("http_api", "function_url")}, indent=2))
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
