"""Cost of an e-mail conversation: each message received as SES receives it (stored in S3 by the
receipt rule's S3 action, the ingress invoked by its Lambda action), answered through the router,
the turn and SES v2 `SendEmail`, metered through local mode as bench/message_cost.py meters a
Telegram message, priced in USD per million e-mail messages.

Two kinds, each in threads of 6 messages (a new subject, then 5 replies in its thread: the
reply's `References` name the thread's root), the echo model answering 1-2 KB as message_cost's:
- email: a plain-text message of a few lines (about 1.2 KB as stored: SES's trace headers, DKIM);
- email_attachment: the same with a 60 KB PNG (the fixture 04_attachment_png.eml's), which the
  turn reads from the stored message (one ranged GET) and keeps in the media bucket.

What the functions do is metered (their AWS requests, Lambda's modelled duration, DynamoDB units,
logs); what SES does on its own side is priced from the messages' sizes: the receipt (per message
and per 256 KB chunk), its S3 action's PUT, the sending (per message; per GB of attachments sent),
and the stored copy's S3 storage for `resources.MAIL.retention_days` (the turn's copy of an
attachment for `media.retention_days`). Prices: bench/prices.json (us-east-1, dated).

Usage: .venv/bin/python bench/email_cost.py [--threads N] [--per-thread N] [--quick]
Writes bench/results/email-cost-latest.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.media_cost import MediaMeter  # noqa: E402
from bench.message_cost import (  # noqa: E402
    CALL_KEYS,
    REPLY_BYTES,
    by_service_operation,
    calls_table,
    local_gateway,
    reply_size,
    table_specs,
)
from bench.meter import Invocation, counted_logs  # noqa: E402
from bench.pricing import PRICES, price, profile, s3_storage_usd_per_million  # noqa: E402

RESULTS = ROOT / "bench" / "results"
FIXTURES = ROOT / "tests" / "fixtures" / "email"
KINDS = ("email", "email_attachment")
ADDRESS = "hermes@example.com"
CHUNK_BYTES = 256 * 1024  # SES bills received mail per message and per 256 KB chunk
GB = 1024**3


def ses_prices() -> dict[str, float]:
    per = PRICES["per_request"]
    return {name: float(per[name]) for name in (
        "ses_inbound_message", "ses_inbound_chunk", "ses_outbound_message", "ses_outbound_attachment_gb",
    )}  # fmt: skip


def png_part() -> bytes:
    """The fixture's PNG attachment part, as Gmail encoded it (base64 in 76-character lines)."""
    raw = (FIXTURES / "04_attachment_png.eml").read_bytes()
    start = raw.index(b"--001636b2b7bde1d3a904c425228d\r\nContent-Type: image/png")
    end = raw.index(b"--001636b2b7bde1d3a904c425228d--")
    return raw[start:end]


TRACE_HEADERS = (  # what SES prepends to a message it stores (as in the fixtures 01 and 02)
    "Return-Path: <{sender}>\r\n"
    "Received: from mail.example.org (mail.example.org [203.0.113.10]) by inbound-smtp.us-east-1.amazonaws.com"
    " with SMTP id {n}example for {to};\r\n Fri, 06 Sep 2019 18:52:14 +0000 (UTC)\r\n"
    "X-SES-Spam-Verdict: PASS\r\nX-SES-Virus-Verdict: PASS\r\n"
    "Received-SPF: pass (spfCheck: domain of example.org designates 203.0.113.10 as permitted sender)"
    " client-ip=203.0.113.10; envelope-from={sender}; helo=mail.example.org;\r\n"
    "Authentication-Results: amazonses.com; spf=pass; dkim=pass header.i=@example.org; dmarc=pass"
    " header.from=example.org;\r\n"
    "DKIM-Signature: v=1; a=rsa-sha256; q=dns/txt; c=relaxed/simple; s=s1; d=example.org; t=1567795934;"
    " h=From:To:Subject:MIME-Version:Content-Type:Message-ID:Date; bh=CZ1SghsYaA6SSCbitzsLISeFoNlpdtH1Pyiexample=;"
    " b=L6VXqR1PSN/FYqJI/VAfPRKFgtakcHCYJvuJqVYbuJT8I3FOhqOvkbcgHxOgswoxPfvGrL6S53H8Er5Do/CPvOM4Tx3ilE+a0G"
    "TYVLjKmwltNeN09YWlJAoqG5KMQPZUxRYaNvYPInLzUdGirdjkbSIgZEnrvq5MzaMWexample=\r\n"
)


def message(kind: str, thread: int, n: int) -> bytes:
    """Message `n` of a thread from person `thread`: a new subject, or a reply in its thread."""
    sender = f"person{thread}@example.org"
    headers = TRACE_HEADERS.format(sender=sender, to=ADDRESS, n=f"{thread}x{n}")
    headers += f"From: Person {thread} <{sender}>\r\nTo: {ADDRESS}\r\nDate: Fri, 6 Sep 2019 18:52:14 +0000\r\n"
    headers += f"Message-ID: <t{thread}-m{n}@example.org>\r\nMIME-Version: 1.0\r\n"
    if n == 0:
        headers += f"Subject: Deploy queue {thread}\r\n"
    else:
        root = f"<t{thread}-m0@example.org>"
        headers += f"Subject: Re: Deploy queue {thread}\r\nIn-Reply-To: <answer-{n - 1}@email.amazonses.com>\r\n"
        headers += f"References: {root} <answer-{n - 1}@email.amazonses.com>\r\n"
    text = f"Message {n}: is the deploy queue green?\r\nThanks,\r\nPerson {thread}\r\n"
    if kind == "email":
        return (headers + "Content-Type: text/plain; charset=UTF-8\r\n\r\n" + text).encode()
    boundary = "001636b2b7bde1d3a904c425228d"
    body = f"--{boundary}\r\nContent-Type: text/plain; charset=UTF-8\r\n\r\n{text}\r\n".encode()
    return (
        (headers + f'Content-Type: multipart/mixed; boundary="{boundary}"\r\n\r\n').encode()
        + body
        + png_part()
        + (f"--{boundary}--\r\n".encode())
    )


def sent_to(gateway: Any, address: str) -> int:
    return sum(1 for row in gateway.outbox(platform="email", chat_id=address) if row.get("status") == "sent")


def wait_sent(gateway: Any, address: str, count: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while sent_to(gateway, address) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{address}: {sent_to(gateway, address)} of {count} answers in {timeout} s")
        time.sleep(0.1)


def run_kind(
    kind: str, number: int, gateway: Any, meter: MediaMeter, threads: int, per_thread: int, solo: int
) -> dict[str, Any]:
    """`solo` messages alone first (the Lambda profile), then the threads at once."""
    alone: list[Invocation] = []
    for n in range(solo):
        thread = 9_000 + 10 * number + n
        meter.wait_idle()
        meter.reset()
        gateway.receive_email(message(kind, thread, 0))
        wait_sent(gateway, f"person{thread}@example.org", 1)
        meter.wait_idle()
        alone.extend(meter.invocations)

    people = [1_000 * (number + 1) + t for t in range(threads)]
    raw_bytes = [len(message(kind, t, n)) for t in people for n in range(per_thread)]

    def talk(thread: int) -> None:
        for n in range(per_thread):
            gateway.receive_email(message(kind, thread, n))
            wait_sent(gateway, f"person{thread}@example.org", n + 1)

    meter.wait_idle()
    meter.reset()
    started = time.perf_counter()
    with counted_logs() as logs:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"mail-{kind}") as pool:
            for future in [pool.submit(talk, t) for t in people]:
                future.result()
        meter.wait_idle()
        seconds = time.perf_counter() - started
    messages = threads * per_thread
    return report_kind(kind, meter, messages, raw_bytes, logs, profile(alone), seconds)


def ses_side(messages: int, raw_bytes: list[int], attachment_bytes_sent: float) -> dict[str, float]:
    """What SES and its S3 action cost per million messages, from the messages' sizes."""
    prices, per = ses_prices(), PRICES["per_request"]
    chunks = sum(math.ceil(size / CHUNK_BYTES) for size in raw_bytes) / messages
    return {
        "ses_receiving": round((prices["ses_inbound_message"] + chunks * prices["ses_inbound_chunk"]) * 1e6, 4),
        "s3_put_by_ses": round(per["s3_put_request"] * 1e6, 4),
        "ses_sending": round(
            (prices["ses_outbound_message"] + attachment_bytes_sent / GB * prices["ses_outbound_attachment_gb"]) * 1e6,
            4,
        ),
    }


def report_kind(
    kind: str, meter: MediaMeter, messages: int, raw_bytes: list[int], logs: Any, solo: dict[str, Any], seconds: float
) -> dict[str, Any]:
    from hermes_gateway import wiring
    from hermes_gateway.resources import MAIL

    priced = price(meter, messages, 0, logs.bytes, len(logs.metrics), solo)
    sends = sum(n for (f, service, op, _), n in meter.calls.items() if service == "sesv2" and op == "SendEmail")
    ses = ses_side(messages, raw_bytes, 0.0)  # the answers carry no attachment here
    functions_total = priced["cost_per_million_usd"]
    total = round(functions_total + sum(ses.values()), 2)
    mean_raw = sum(raw_bytes) / len(raw_bytes)
    retention = wiring.settings().media.retention_days
    storage = {
        "stored_message_bytes": round(mean_raw),
        "stored_message_days": min(MAIL.retention_days, retention),
        "stored_message_usd_per_million": round(
            s3_storage_usd_per_million(mean_raw, min(MAIL.retention_days, retention)), 4
        ),
        "attachment_copy_bytes": round(meter.stored_bytes / messages),
        "attachment_copy_days": retention,
        "attachment_copy_usd_per_million": round(
            s3_storage_usd_per_million(meter.stored_bytes / messages, retention), 4
        ),
    }
    return {
        "kind": kind,
        "messages": messages,
        "seconds": round(seconds, 1),
        "cost_per_million_usd": total,
        "functions_cost_per_million_usd": functions_total,
        "cost_by_service": {**priced["cost_by_service"], **ses},
        "ses_sends_per_message": round(sends / messages, 3),
        "s3_storage": storage,
        "aws_requests_per_message_total": round(sum(meter.calls.values()) / messages, 3),
        "aws_requests_per_message": by_service_operation(meter, messages),
        "function_requests": calls_table(meter.calls, messages, CALL_KEYS),
        "per_message": priced["per_message"],
        "lambda_by_function": priced["lambda_by_function"],
        "unpriced_requests_per_message": {
            k: v for k, v in priced["unpriced_requests_per_message"].items() if k != "sesv2.SendEmail"
        },
        "largest_dynamodb_item_bytes": max(meter.largest_item.values(), default=0),
        "largest_workflow_state_bytes": max(meter.largest_state.values(), default=0),
        "failed_invocations": meter.failed_invocations,
    }


def run(threads: int = 10, per_thread: int = 6, solo: int = 3, kinds: tuple[str, ...] = KINDS) -> dict[str, Any]:
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    started = time.perf_counter()
    meter = MediaMeter(reply_bytes=reply_size(*REPLY_BYTES))
    meter.install()
    meter.watch_states()
    environ = {"EMAIL_ENABLED": "true", "EMAIL_ADDRESS": ADDRESS, "EMAIL_ALLOWED_USERS": "*@example.org"}
    try:
        with local_gateway(environ) as (gateway, _):
            meter.table_specs = table_specs()
            results = {
                kind: run_kind(kind, n, gateway, meter, threads, per_thread, solo) for n, kind in enumerate(kinds)
            }
    finally:
        meter.uninstall()
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "threads_per_kind": threads,
        "messages_per_thread": per_thread,
        "solo_per_kind": solo,
        "cost_per_million_usd": {k: v["cost_per_million_usd"] for k, v in results.items()},
        "kinds": results,
        "prices_recorded": PRICES["recorded"],
        "ses_prices": ses_prices(),
        "excluded": EXCLUDED,
        "seconds": round(time.perf_counter() - started, 1),
    }


EXCLUDED = [
    "the model's tokens",
    "free tiers (SES's first 3,000 messages a month in the first year, Lambda's, S3's)",
    "data transfer; the domain's DNS; SES's dedicated IPs and Virtual Deliverability Manager (not used)",
    "EventBridge for the bounces and complaints: SES's events on the default bus are not billed as custom "
    "events, and the rule's invoke of the ingress function is one Lambda request per bounce (none in this run)",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=10, help="threads of each kind, talking at once")
    parser.add_argument("--per-thread", type=int, default=6, help="messages in each thread")
    parser.add_argument("--solo", type=int, default=3, help="messages of each kind measured alone first")
    parser.add_argument("--quick", action="store_true", help="4 threads of 4 messages of each kind, 2 alone")
    args = parser.parse_args()
    if args.quick:
        args.threads, args.per_thread, args.solo = 4, 4, 2
    report = run(args.threads, args.per_thread, args.solo)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "email-cost-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for name, row in report["kinds"].items():
        storage = row["s3_storage"]
        functions = row["functions_cost_per_million_usd"]
        print(
            f"  {name:<17} {row['cost_per_million_usd']:7.2f} USD/M (functions {functions:.2f})"
            f"  + storage {storage['stored_message_usd_per_million'] + storage['attachment_copy_usd_per_million']:.2f}"
            f"  requests {row['aws_requests_per_message_total']:5.2f}"
        )
    print(f"written to {out.relative_to(ROOT)} in {report['seconds']} s")


if __name__ == "__main__":
    main()
