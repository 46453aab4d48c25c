"""Cost of an iMessage message through BlueBubbles, with the echoes of each reply the server posts.

The text message's bench (bench/message_cost.py, whose meter and prices this uses) on BlueBubbles:
local mode in-process with the echo model answering 1-2 KB, and a stub BlueBubbles server on
loopback. The stub takes every reply (`POST /api/v1/message/text`) and, as the real server does,
posts it back to the gateway's webhook twice as the bot's own `new-message` (matched to its send,
with its tempGuid; then read from the Messages database), which ingress acknowledges and leaves
out. The load: half DMs, half groups, each message the server's own `new-message` body
(tests/fixtures/bluebubbles/) with its GUID, chat and text; 5% `/help`; no platform retries (the
server never retries). A session's next message waits for its reply, 0.5 s later.

Measured: a solo phase first (messages one at a time: the Lambda profile), then the load, with
everything the functions do counted, echoes included (they are webhook requests and ingress
invocations). Then the echoes alone, sent on their own from 10 clients, priced per echo, so the
report can say what a message costs without them (what any webhook platform's message costs, to
compare with message_cost's Telegram mix) and what its echoes add.

Usage: .venv/bin/python bench/bluebubbles_cost.py [--messages N] [--sessions N] [--quick]
Writes bench/results/bluebubbles-cost-latest.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.message_cost import (  # noqa: E402
    _WORDS,
    REPLY_BYTES,
    RESULTS,
    local_gateway,
    measured,
    outbox,
    reply_size,
    table_specs,
    wait_outbox,
)
from bench.meter import Invocation, Meter, counted_logs  # noqa: E402
from bench.pricing import PRICES, price, profile  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "bluebubbles"
SECRET = "bench-bluebubbles-webhook"  # the stub's and local mode's, made for this run
PASSWORD = "bench-bluebubbles-server"
CONCURRENCY = 10


def webhook(base_url: str, event: dict[str, Any]) -> int:
    """POST one event as the BlueBubbles server does: JSON, the secret in the registered URL."""
    url = base_url + "/webhooks/bluebubbles?" + urllib.parse.urlencode({"password": SECRET})
    request = urllib.request.Request(
        url, data=json.dumps(event).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
        return int(response.status)


class Server:
    """A BlueBubbles server on loopback: takes each reply, then posts its two echoes to the gateway."""

    def __init__(self) -> None:
        self.received: dict[str, list[str]] = defaultdict(list)
        self.gateway_url = ""
        self.echoes_posted = 0
        self.echo_failures = 0
        self._lock = threading.Condition()
        self._next = 0
        self._echoes = ThreadPoolExecutor(max_workers=4, thread_name_prefix="bb-echo")
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                chat, text, temp = str(body.get("chatGuid")), str(body.get("message")), body.get("tempGuid")
                with server._lock:
                    server._next += 1
                    guid = f"B0000000-0000-4000-8000-{server._next:012d}"
                    server.received[chat].append(text)
                    server._lock.notify_all()
                answer = json.dumps({"status": 200, "message": "Message sent!", "data": {"guid": guid}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                server._echoes.submit(server._echo, chat, guid, text, temp)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="bluebubbles-stub", daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def _echo(self, chat: str, guid: str, text: str, temp: Any) -> None:
        for event in own_messages(chat, guid, text, temp):
            try:
                status = webhook(self.gateway_url, event)
            except OSError:
                status = 0
            with self._lock:
                self.echoes_posted += 1
                self.echo_failures += status != 200
                self._lock.notify_all()

    def wait(self, chat: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.received[chat]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no reply #{count} to {chat} in {timeout} s")
                self._lock.wait(left)

    def wait_echoes(self, timeout: float = 120.0) -> None:
        """Until every reply's two echoes are posted."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.echoes_posted < 2 * sum(len(v) for v in self.received.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("echoes still being posted")
                self._lock.wait(left)

    def close(self) -> None:
        self._echoes.shutdown(wait=True)
        self._server.shutdown()
        self._server.server_close()


def _fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return loaded


def own_messages(chat: str, guid: str, text: str, temp: Any) -> list[dict[str, Any]]:
    """The server's two `new-message` events for a message the bot sent (matched, then read back)."""
    events = []
    for name in ("new_message_from_me_send_match", "new_message_from_me_echo"):
        event = _fixture(name)
        event["data"].update(guid=guid, text=text, dateCreated=int(time.time() * 1000))
        event["data"]["chats"][0]["guid"] = chat
        if "tempGuid" in event["data"]:
            event["data"]["tempGuid"] = temp
        events.append(event)
    return events


@dataclass(frozen=True)
class Session:
    chat: str  # the chat GUID
    address: str  # the sender's handle


def sessions(count: int, first: int = 0) -> list[Session]:
    """Half DMs, half groups."""
    found = []
    for n in range(first, first + count):
        address = f"+1555{n:07d}"
        chat = f"iMessage;-;{address}" if n % 2 == 0 else f"iMessage;+;chat{900_000 + n}"
        found.append(Session(chat, address))
    return found


def message(n: int, session: Session, text: str) -> dict[str, Any]:
    kind = "new_message_dm_text" if ";-;" in session.chat else "new_message_group_text"
    event = _fixture(kind)
    data = event["data"]
    data.update(guid=f"A0000000-0000-4000-8000-{n:012d}", text=text, dateCreated=int(time.time() * 1000))
    data["handle"]["address"] = session.address
    data["chats"][0]["guid"] = session.chat
    return event


def plan(all_sessions: list[Session], messages: int, seed: int, first: int) -> dict[Session, list[dict[str, Any]]]:
    rng = random.Random(seed)
    commands = set(rng.sample(range(messages), round(messages * 0.05)))
    steps: dict[Session, list[dict[str, Any]]] = {s: [] for s in all_sessions}
    for n in range(messages):
        session = all_sessions[n % len(all_sessions)]
        text = "/help" if n in commands else f"message {n}: " + " ".join(rng.choice(_WORDS) for _ in range(8))
        steps[session].append(message(first + n, session, text))
    return steps


def converse(base_url: str, server: Server, session: Session, events: list[dict[str, Any]], think: float) -> None:
    for n, event in enumerate(events, start=1):
        if webhook(base_url, event) != 200:
            raise RuntimeError("the webhook refused a message")
        server.wait(session.chat, n, timeout=120)
        time.sleep(think)


def environment(server: Server) -> dict[str, str]:
    return {
        "BLUEBUBBLES_ENABLED": "true",
        "BLUEBUBBLES_WEBHOOK_SECRET": SECRET,
        "BLUEBUBBLES_PASSWORD": PASSWORD,
        "BLUEBUBBLES_SERVER_URL": server.base_url,
    }


def run(messages: int, session_count: int, solo: int, echoes: int, seed: int = 11) -> dict[str, Any]:
    meter = Meter(reply_bytes=reply_size(*REPLY_BYTES))
    meter.install()
    server = Server()
    try:
        with local_gateway(environment(server)) as (gateway, _):
            server.gateway_url = gateway.url
            meter.table_specs = table_specs()
            warm = Session("iMessage;-;+15559999999", "+15559999999")
            converse(gateway.url, server, warm, [message(1, warm, "warm up")], 0)
            alone: list[Invocation] = []
            for session, events in plan(sessions(4, first=5_000), solo, seed + 1, 900_000).items():
                for n, event in enumerate(events, start=1):
                    meter.wait_idle()
                    meter.reset()
                    webhook(gateway.url, event)
                    server.wait(session.chat, n, timeout=60)
                    server.wait_echoes()  # the message's own work, and its reply's echoes: the load's mix
                    meter.wait_idle()
                    alone.extend(meter.invocations)
            load = plan(sessions(session_count), messages, seed, 500_000)
            server.wait_echoes()
            meter.wait_idle()
            meter.reset()
            sent_before = sum(len(v) for v in server.received.values())
            started = time.perf_counter()
            with counted_logs() as logs:
                with ThreadPoolExecutor(max_workers=CONCURRENCY, thread_name_prefix="client") as pool:
                    for future in [pool.submit(converse, gateway.url, server, s, e, 0.5) for s, e in load.items()]:
                        future.result()
                wait_outbox(messages + 1 + solo, timeout=60)
                server.wait_echoes()
                meter.wait_idle()
            seconds = time.perf_counter() - started
            sends = sum(len(v) for v in server.received.values()) - sent_before
            rows = outbox()
            webhook_requests = messages + 2 * sends
            priced, via_url = priced_both_ways(meter, messages, webhook_requests, logs, alone)
            counted = measured(meter, messages, logs)
            echo_report = echoes_alone(gateway.url, server, meter, echoes)  # the meter counts anew
    finally:
        meter.uninstall()
        server.close()
    chats = {s.chat for s in load}
    replies = [r for r in rows if r["chat_id"] in chats and not r["delivery_id"].startswith("busy-")]
    if len(replies) != messages or any(r["status"] != "sent" for r in replies) or server.echo_failures:
        raise RuntimeError(f"{len(replies)} of {messages} replies in the outbox; {server.echo_failures} echoes refused")
    total = priced["cost_per_million_usd"]
    echoes_per_message = 2 * sends / messages
    echo_share = round(echoes_per_message * echo_report["usd_per_million_echoes"], 2)
    echo_share_via_url = round(echoes_per_message * echo_report["usd_per_million_echoes_function_url"], 2)
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "messages_tested": messages,
        "sessions": session_count,
        "load": {
            "dm_and_group_sessions": session_count,
            "gateway_commands": round(messages * 0.05),
            "platform_retries": 0,
            "sends": sends,
            "echo_webhooks": 2 * sends,
            "webhook_requests": webhook_requests,
            "solo_messages": solo,
            "seed": seed,
        },
        "usd_per_million_messages": total,
        "usd_per_million_messages_without_echoes": round(total - echo_share, 2),
        "usd_per_million_messages_of_echoes": echo_share,
        # the same run priced with the server posting to the ingress function's URL (`ingress.endpoint:
        # function_url`): no API Gateway request and no access line, for the message or its echoes
        "usd_per_million_messages_function_url": via_url["cost_per_million_usd"],
        "usd_per_million_messages_without_echoes_function_url": round(
            via_url["cost_per_million_usd"] - echo_share_via_url, 2
        ),
        "echoes": echo_report,
        **priced,
        "prices_recorded": PRICES["recorded"],
        **counted,
        "seconds": round(seconds, 1),
    }


def priced_both_ways(
    meter: Meter, units: int, webhook_requests: int, logs: Any, solo: list[Invocation]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run priced as deployed by default (API Gateway) and with the ingress function's URL."""
    lambda_profile = profile(solo)
    args = (meter, units, webhook_requests, logs.bytes, len(logs.metrics), lambda_profile)
    return price(*args), price(*args, endpoint="function_url")


def echoes_alone(base_url: str, server: Server, meter: Meter, count: int) -> dict[str, Any]:
    """`count` echoes of messages the bot sent, posted on their own: what one echo costs."""
    events = [e for n in range(count // 2) for e in own_messages("iMessage;-;+15550001111", f"ECHO-{n}", "hi", "t")]
    solo: list[Invocation] = []
    for event in events[:6]:
        meter.wait_idle()
        meter.reset()
        webhook(base_url, event)
        meter.wait_idle()
        solo.extend(meter.invocations)
    meter.reset()
    with counted_logs() as logs:
        with ThreadPoolExecutor(max_workers=CONCURRENCY, thread_name_prefix="echo") as pool:
            answers = list(pool.map(lambda event: webhook(base_url, event), events))
        meter.wait_idle()
    if any(status != 200 for status in answers):
        raise RuntimeError("an echo was refused")
    priced, via_url = priced_both_ways(meter, len(events), len(events), logs, solo)
    return {
        "echoes": len(events),
        "usd_per_million_echoes": priced["cost_per_million_usd"],
        "usd_per_million_echoes_function_url": via_url["cost_per_million_usd"],
        "cost_by_service": priced["cost_by_service"],
        "aws_requests_per_echo": round(sum(meter.calls.values()) / len(events), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--solo", type=int, default=12, help="messages measured alone first (Lambda time)")
    parser.add_argument("--echoes", type=int, default=200, help="echoes posted on their own (one echo's price)")
    parser.add_argument("--quick", action="store_true", help="120 messages over 12 sessions, 6 alone, 60 echoes")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.sessions, args.solo, args.echoes = 120, 12, 6, 60
    report = run(args.messages, args.sessions, args.solo, args.echoes)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "bluebubbles-cost-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    keys = (
        "usd_per_million_messages",
        "usd_per_million_messages_without_echoes",
        "usd_per_million_messages_of_echoes",
        "usd_per_million_messages_function_url",
    )
    print(json.dumps({k: report[k] for k in keys} | {"cost_by_service": report["cost_by_service"]}, indent=2))
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
