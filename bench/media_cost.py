"""Cost of a media message: text, a photo, a voice note, a PDF and a reply with a photo, each
metered through local mode as bench/message_cost.py meters a text message, priced in USD per
million messages, and compared with the text message of the same run.

Local mode runs in-process with the echo provider (answers made 1-2 KB long, as message_cost's),
a Telegram on loopback that hands over files (getFile, then the download from the file URL) and
takes the replies (sendMessage, sendPhoto), an OpenAI-compatible speech to text server on
loopback for the voice notes, and a file host on loopback for the reply's `MEDIA:` line (the echo
model's answer gets the line when the user asks for the chart). Each kind runs in its own
sessions, one after the other, with the meter reset between them:

- text: a message of a few words (the baseline);
- photo: a Telegram photo (a ~200 KB JPEG's bytes, the largest of two sizes) with a caption;
- voice: a voice note (~30 KB of Ogg Opus, 15 s by its container), transcribed by the fake (the
  transcription's price is not counted; its wait is one external round trip of the CPU model, as
  every platform request is), answered in text (its chats said `/voice off` first, unmetered: that
  opens their sessions, so no session starts in the metered messages);
- voice_reply: the same voice note answered with a voice note too (its chats said `/voice auto`,
  the default, first, the same way; `tts.provider: openai`): the answer's first `tts.max_chars`
  spoken by the fake speech server (~300 KB of Ogg Opus, 90 s), stored in the bucket once and sent
  with sendVoice after the text (1-2 KB: over the caption's 1,024 characters); the speech API's
  price per character is reported apart (`speech`), a model cost outside the AWS total like the
  model's tokens;
- document: a one-page PDF with a caption (its text read with pypdf);
- outbound_photo: a text message whose answer carries `MEDIA:<url>` (a ~200 KB PNG's bytes
  fetched into the bucket and sent with sendPhoto).

For each kind a few messages first run one at a time (the Lambda profile, as message_cost's solo
phase), then the kind's sessions talk at once. Reported per kind: USD per million messages by
service (S3 requests in the total, PUT and GET tiers; S3 storage for `media.retention_days`
apart), AWS requests per message by function, service and operation, the platform's requests,
the difference from text, the largest DynamoDB item written and the largest workflow state
(`limits_ok`: no item over 4 KB, no state over 32 KB).

Usage: .venv/bin/python bench/media_cost.py [--messages N] [--sessions N] [--solo N] [--quick]
Writes bench/results/media-cost-latest.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.message_cost import (  # noqa: E402
    CALL_KEYS,
    REPLY_BYTES,
    Session,
    by_service_operation,
    calls_table,
    local_gateway,
    make_sessions,
    post_update,
    reply_size,
    table_specs,
    telegram_update,
)
from bench.meter import Invocation, Meter, _context, counted_logs, resource_name  # noqa: E402
from bench.pricing import PRICES, price, profile, s3_storage_usd_per_million  # noqa: E402
from tests.fakes.loopback import ScriptedAnswer  # noqa: E402
from tests.fakes.media_server import FakeMediaHost, FakeSpeech, MediaTelegram, file, minimal_pdf, ogg_opus  # noqa: E402
from tests.fakes.telegram_server import MEDIA_METHODS, RecordedRequest  # noqa: E402
from tests.fakes.upload_server import form_fields  # noqa: E402

RESULTS = ROOT / "bench" / "results"
KINDS = ("text", "photo", "voice", "voice_reply", "document", "outbound_photo")
MEDIA_KINDS = KINDS[1:]
ITEM_LIMIT_BYTES = 4 * 1024  # the issue's: media adds no DynamoDB item over 4 KB
STATE_LIMIT_BYTES = 32 * 1024  # and no workflow state over 32 KB (Step Functions' own limit is 256 KB)
OUTBOUND_ASK = "send me the chart"  # the echo model's answer then carries a MEDIA: line
# What a kind's chats say first, unmetered: speech is on in the run, and the voice kind stays the
# transcription's cost alone (voice_reply is the same note answered with a voice note too, its
# chats set up the same way: the command opens their sessions before the metering, as for voice).
SET_UP = {"voice": "/voice off", "voice_reply": "/voice auto"}
# The speech API's price, a model cost kept outside the AWS total (USD per million characters
# spoken). OpenAI's tts-1: 15; gpt-4o-mini-tts (the default) is billed by tokens, 0.60 USD per
# million text tokens in and 12 per million audio tokens out, about 15 per million characters as
# billed (a 4,096-character text about 0.06 USD); Amazon Polly: 4 (standard), 16 (neural). Recorded
# 2026-12-06 from the providers' pricing pages as the project's notes quote them: check before quoting.
SPEECH_USD_PER_MILLION_CHARACTERS = 15.0
# Amazon Polly (`tts.provider: polly`), by engine, USD per million characters (aws.amazon.com/polly/
# pricing, as recorded 2026-12-06): an AWS charge, reported beside the other provider's for the same
# measured characters (the AWS side of a spoken answer is the same request, to Polly instead).
POLLY_USD_PER_MILLION_CHARACTERS = {"standard": 4.0, "neural": 16.0, "generative": 30.0, "long-form": 100.0}


def _bytes(head: bytes, size: int, tail: bytes = b"") -> bytes:
    """`size` bytes of a file: its magic number, deterministic filler that does not compress, its end."""
    import random

    body = random.Random(size).randbytes(size - len(head) - len(tail))
    return head + body + tail


PHOTO = _bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", 200_000, b"\xff\xd9")  # a ~200 KB JPEG's bytes
VOICE = ogg_opus(15.0, 30_000)  # a ~30 KB Ogg Opus voice note of 15 s (its length is read before it is heard)
SPOKEN = ogg_opus(90.0, 300_000)  # an answer spoken: ~300 KB of Ogg Opus, about 1,500 characters' worth
CHART = _bytes(b"\x89PNG\r\n\x1a\n", 200_000)  # the file a reply attaches
PDF = minimal_pdf("Quarterly report: revenue grew 12 percent, costs fell 3 percent, the queue is green")
TRANSCRIPT = "remind me to check the deploy queue tomorrow morning and tell the team"


# --------------------------------------------------------------------------------------------------
# The platform: Telegram handing over files and taking replies, counted by chat


@dataclass
class BenchTelegram(MediaTelegram):
    """MediaTelegram that counts, by chat and thread, the messages and files it accepted (not the
    router's busy notices); `notices` keeps what told a chat that a file could not be opened."""

    thread_name: ClassVar[str] = "bench-telegram"
    delivered: Counter[tuple[str, str]] = field(default_factory=Counter)
    notices: list[str] = field(default_factory=list)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        answer = super()._default_answer(request)
        if answer.status == 200 and request.api_method in ("sendMessage", *MEDIA_METHODS):
            chat, thread, text = _addressed(request)
            from hermes_gateway.services.turn_commands import BUSY_NOTICES

            if text not in BUSY_NOTICES.values():
                self.delivered[(chat, thread)] += 1
            if text.startswith("I could not open"):
                self.notices.append(text)
        return answer

    def platform_requests(self, since: int = 0) -> Counter[str]:
        """Requests from `since` on by Bot API method (a file download is `file download`)."""
        with self._lock:
            return Counter(r.api_method or f"file {'download' if r.http_method == 'GET' else r.path}"
                           for r in self.requests[since:])  # fmt: skip

    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)


def _addressed(request: RecordedRequest) -> tuple[str, str, str]:
    if request.api_method == "sendMessage":
        body = request.json if isinstance(request.json, dict) else {}
        return str(body.get("chat_id")), str(body.get("message_thread_id") or ""), str(body.get("text") or "")
    fields = form_fields(request.headers.get("content-type", ""), request.raw)
    text = lambda name: fields[name].text if name in fields else ""  # noqa: E731
    return text("chat_id"), text("message_thread_id"), text("caption")


# --------------------------------------------------------------------------------------------------
# The meter, with the largest DynamoDB item, the largest workflow state and the bytes stored


@dataclass
class MediaMeter(Meter):
    largest_item: dict[str, int] = field(default_factory=dict)  # table -> bytes, of the items written
    largest_state: dict[str, int] = field(default_factory=dict)  # execution input, task input, task result
    stored_bytes: int = 0  # the objects put in the media bucket

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self.largest_item.clear()
            self.largest_state.clear()
            self.stored_bytes = 0

    def note_state(self, what: str, size: int) -> None:
        with self._lock:
            self.largest_state[what] = max(self.largest_state.get(what, 0), size)

    def _request_units(
        self, operation: str, params: dict[str, Any], result: Any, before: list[Any], after: list[Any]
    ) -> Any:
        with self._lock:
            for table, item in after:
                if item:
                    name = resource_name("dynamodb", {"TableName": table})
                    self.largest_item[name] = max(self.largest_item.get(name, 0), int(item[0]))
        return super()._request_units(operation, params, result, before, after)

    def _metered(self, original: Any, client: Any, operation: str, params: dict[str, Any]) -> Any:
        # Sized before the call: botocore replaces a PutObject's Body with a stream as it sends it.
        if getattr(_context, "function", None) is not None:
            service = client.meta.service_model.service_name
            if service == "s3" and operation == "PutObject":
                size = _body_size(params.get("Body", b""))
                with self._lock:
                    self.stored_bytes += size
            elif service == "stepfunctions" and operation == "StartExecution":
                self.note_state("execution input", len(str(params.get("input", "")).encode()))
        return super()._metered(original, client, operation, params)

    def watch_states(self) -> None:
        """Each workflow task's input (the state it is given) and result, by size (JSON)."""
        from hermes_local.runtime import Functions

        inner, meter = Functions.__dict__["_call"], self

        def _call(functions: Any, name: str, event: dict[str, Any], context: Any) -> Any:
            result = inner(functions, name, event, context)
            if isinstance(event, dict) and "step" in event:
                given, answered = _json_bytes(event), _json_bytes(result)
                meter.note_state("task input", given)  # the state after the last task's ResultPath merge
                meter.note_state("task result", answered)
            return result

        self._patch(Functions, "_call", _call)

    def ask_for_media(self, url: str) -> None:
        """The echo model's answer to OUTBOUND_ASK ends with `MEDIA:<url>` (after the meter's
        reply-size filler, which it wraps)."""
        import hermes_gateway.providers as providers

        made = providers.make_provider

        class WithMedia:
            def __init__(self, inner: Any) -> None:
                self.inner, self.name = inner, inner.name

            def complete(self, system: str, messages: list[Any], tools: list[Any] | None = None) -> Any:
                reply = self.inner.complete(system, messages, tools)
                last = next((m for m in reversed(messages) if m.role == "user"), None)
                if reply.text and not reply.tool_calls and last is not None and OUTBOUND_ASK in last.content:
                    reply = dataclasses.replace(reply, text=f"{reply.text}\nMEDIA:{url}")
                return reply

        self._patch(providers, "make_provider", lambda *a, **k: WithMedia(made(*a, **k)))


def _body_size(body: Any) -> int:
    """A PutObject body's bytes: given whole, or a file streamed from where it stands (a spooled file)."""
    if isinstance(body, bytes | bytearray | str):
        return len(body)
    if hasattr(body, "seek") and hasattr(body, "tell"):
        at = body.tell()
        end = body.seek(0, os.SEEK_END)
        body.seek(at)
        return int(end - at)
    return 0


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, default=str, separators=(",", ":")).encode()) if value is not None else 0


# --------------------------------------------------------------------------------------------------
# The messages


def kind_update(kind: str, update_id: int, session: Session) -> dict[str, Any]:
    """A Telegram update of one kind, as a person in `session` sends it."""
    if kind == "text":
        return telegram_update(update_id, f"message {update_id}: is the deploy queue green", session)
    if kind == "outbound_photo":
        return telegram_update(update_id, f"{OUTBOUND_ASK} for {update_id}", session)
    update = telegram_update(update_id, "", session)
    message = update["message"]
    del message["text"]
    if kind == "photo":
        message["caption"] = "what is in this picture?"
        message["photo"] = [
            {"file_id": "photo-small", "file_unique_id": "ps", "width": 90, "height": 67, "file_size": 1_500},
            {"file_id": "photo", "file_unique_id": "p", "width": 1280, "height": 960, "file_size": len(PHOTO)},
        ]
    elif kind in ("voice", "voice_reply"):
        message["voice"] = {"file_id": "voice", "file_unique_id": "v", "duration": 15, "mime_type": "audio/ogg",
                            "file_size": len(VOICE)}  # fmt: skip
    elif kind == "document":
        message["caption"] = "summarize this"
        message["document"] = {"file_id": "pdf", "file_unique_id": "d", "file_name": "q3.pdf",
                               "mime_type": "application/pdf", "file_size": len(PDF)}  # fmt: skip
    else:
        raise ValueError(f"unknown kind {kind}")
    return update


def _wait(telegram: BenchTelegram, key: tuple[str, str], count: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while telegram.delivered[key] < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"chat {key}: {telegram.delivered[key]} of {count} sends in {timeout} s")
        time.sleep(0.02)


def _send(url: str, update: dict[str, Any]) -> None:
    if post_update(url, update) != 200:
        raise RuntimeError("the webhook was refused")


def _set_up(url: str, telegram: BenchTelegram, kind: str, session: Session, update_id: int) -> int:
    """The kind's chat set up before it is metered (SET_UP's command sent and answered); the
    sends the chat has had so far."""
    command = SET_UP.get(kind)
    if command is not None:
        before = telegram.delivered[session.key]
        _send(url, telegram_update(update_id, command, session))
        _wait(telegram, session.key, before + 1)
    return telegram.delivered[session.key]


def run_kind(
    kind: str, number: int, url: str, telegram: BenchTelegram, meter: MediaMeter,
    messages: int, sessions: int, solo: int, concurrency: int, think: float,
) -> dict[str, Any]:  # fmt: skip
    """One kind: a warm-up message (how many sends it gets), `solo` alone, then the sessions at once."""
    first = 600_000 + number * 10_000
    set_up_ids = iter(range(first + 5_000, first + 10_000))
    warm = make_sessions(1, first=9_000 + 4 * number)[0]
    before = _set_up(url, telegram, kind, warm, next(set_up_ids))
    _send(url, kind_update(kind, first, warm))
    _wait(telegram, warm.key, before + 1)
    meter.wait_idle(quiet=1.5)
    sends = telegram.delivered[warm.key] - before

    alone: list[Invocation] = []
    for n, session in enumerate(make_sessions(solo, first=7_000 + 100 * number), start=1):
        before = _set_up(url, telegram, kind, session, next(set_up_ids))
        meter.wait_idle()
        meter.reset()
        _send(url, kind_update(kind, first + n, session))
        _wait(telegram, session.key, before + sends)
        meter.wait_idle()
        alone.extend(meter.invocations)

    people = make_sessions(sessions, first=1_000 * (number + 1))
    plan: dict[Session, list[dict[str, Any]]] = {s: [] for s in people}
    for n in range(messages):
        session = people[n % len(people)]
        plan[session].append(kind_update(kind, first + 1_000 + n, session))

    offsets = {session: _set_up(url, telegram, kind, session, next(set_up_ids)) for session in people}

    def talk(session: Session, updates: list[dict[str, Any]]) -> None:
        for n, update in enumerate(updates, start=1):
            _send(url, update)
            _wait(telegram, session.key, offsets[session] + n * sends)
            if think:
                time.sleep(think)

    meter.wait_idle()
    meter.reset()
    since = telegram.request_count()
    started = time.perf_counter()
    with counted_logs() as logs:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"client-{kind}") as pool:
            for future in [pool.submit(talk, s, u) for s, u in plan.items()]:
                future.result()
        meter.wait_idle()
        seconds = time.perf_counter() - started
    platform = telegram.platform_requests(since)
    return report_kind(kind, meter, messages, logs, profile(alone), seconds, sends, platform)


def report_kind(
    kind: str, meter: MediaMeter, messages: int, logs: Any, solo: dict[str, Any], seconds: float,
    sends: int, platform: Counter[str],
) -> dict[str, Any]:  # fmt: skip
    from hermes_gateway import wiring

    priced = price(meter, messages, messages, logs.bytes, len(logs.metrics), solo)
    retention = wiring.settings().media.retention_days
    stored = meter.stored_bytes / messages
    largest_item = max(meter.largest_item.values(), default=0)
    largest_state = max(meter.largest_state.values(), default=0)
    return {
        "kind": kind,
        "messages": messages,
        "seconds": round(seconds, 1),
        "cost_per_million_usd": priced["cost_per_million_usd"],
        "cost_by_service": priced["cost_by_service"],
        "s3_storage": {
            "bytes_stored_per_message": round(stored),
            "retention_days": retention,
            "usd_per_million_messages": round(s3_storage_usd_per_million(stored, retention), 4),
        },
        "aws_requests_per_message_total": round(sum(meter.calls.values()) / messages, 3),
        "aws_requests_per_message": by_service_operation(meter, messages),
        "function_requests": calls_table(meter.calls, messages, CALL_KEYS),
        "external_requests_per_message": {
            f"{function} -> {host}": round(n / messages, 3) for (function, host), n in sorted(meter.external.items())
        },
        "platform_requests_per_message": {k: round(v / messages, 3) for k, v in sorted(platform.items())},
        "platform_sends_per_message": sends,
        "per_message": priced["per_message"],
        "lambda_by_function": priced["lambda_by_function"],
        "unpriced_requests_per_message": priced["unpriced_requests_per_message"],
        "lambda_usd_per_million_wall_clock": priced["not_in_total"]["lambda_usd_per_million_wall_clock"],
        "largest_dynamodb_item_bytes": largest_item,
        "largest_dynamodb_item_by_table": dict(sorted(meter.largest_item.items())),
        "largest_workflow_state_bytes": largest_state,
        "largest_workflow_state_by_part": dict(sorted(meter.largest_state.items())),
        "limits_ok": limits_ok(largest_item, largest_state),
        "failed_invocations": meter.failed_invocations,
    }


# --------------------------------------------------------------------------------------------------
# The summary (pure)


def limits_ok(largest_item: int, largest_state: int) -> bool:
    """The issue's limits: no DynamoDB item over 4 KB, no workflow state over 32 KB."""
    return largest_item <= ITEM_LIMIT_BYTES and largest_state <= STATE_LIMIT_BYTES


def summarize(kinds: dict[str, dict[str, Any]], baseline: str = "text") -> dict[str, Any]:
    """Per kind: USD per million (requests, and with storage), the difference from `baseline` in
    total and by service, AWS requests per message and their difference, the largest item and state."""
    base = kinds[baseline]
    out: dict[str, Any] = {}
    for name, kind in kinds.items():
        services = sorted(set(kind["cost_by_service"]) | set(base["cost_by_service"]))
        storage = kind.get("s3_storage", {}).get("usd_per_million_messages", 0.0)
        out[name] = {
            "usd_per_million": kind["cost_per_million_usd"],
            "usd_per_million_with_storage": round(kind["cost_per_million_usd"] + storage, 2),
            "s3_storage_usd_per_million": storage,
            "delta_vs_text_usd_per_million": round(kind["cost_per_million_usd"] - base["cost_per_million_usd"], 2),
            "delta_by_service": {
                s: round(kind["cost_by_service"].get(s, 0.0) - base["cost_by_service"].get(s, 0.0), 4)
                for s in services
                if abs(kind["cost_by_service"].get(s, 0.0) - base["cost_by_service"].get(s, 0.0)) >= 0.00005
            },
            "aws_requests_per_message": kind["aws_requests_per_message_total"],
            "delta_aws_requests_per_message": round(
                kind["aws_requests_per_message_total"] - base["aws_requests_per_message_total"], 3
            ),
            "largest_dynamodb_item_bytes": kind["largest_dynamodb_item_bytes"],
            "largest_workflow_state_bytes": kind["largest_workflow_state_bytes"],
            "limits_ok": kind["limits_ok"],
        }
    return out


# --------------------------------------------------------------------------------------------------


def run(
    messages: int = 60, sessions: int = 10, solo: int = 3, concurrency: int = 10, think: float = 0.5,
    kinds: tuple[str, ...] = KINDS,
) -> dict[str, Any]:  # fmt: skip
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    started = time.perf_counter()
    meter = MediaMeter(reply_bytes=reply_size(*REPLY_BYTES))
    with BenchTelegram() as telegram, FakeSpeech(text=TRANSCRIPT, voice=SPOKEN) as speech, FakeMediaHost() as host:
        for file_id, data in (("photo", PHOTO), ("voice", VOICE), ("pdf", PDF)):
            telegram.add_file(file_id, data)
        host.files["/chart.png"] = file(CHART, "image/png")
        meter.install()
        meter.watch_states()
        meter.ask_for_media(host.url("/chart.png"))
        environ = {"TELEGRAM_BOT_TOKEN": telegram.token, "TELEGRAM_API_BASE_URL": telegram.base_url,
                   "STT_BASE_URL": speech.base_url, "GATEWAY_TTS_PROVIDER": "openai",
                   "TTS_BASE_URL": speech.base_url,
                   # a forum topic's shared session lets only admins run /voice: SET_UP's chats may
                   "GATEWAY_USER_COMMANDS": "voice"}  # fmt: skip
        try:
            with local_gateway(environ) as (gateway, _):
                meter.table_specs = table_specs()
                results, spoken = {}, {}
                for number, kind in enumerate(kinds):
                    said = len(speech.spoken)
                    results[kind] = run_kind(
                        kind, number, gateway.url, telegram, meter, messages, sessions, solo, concurrency, think
                    )
                    spoken[kind] = [len(s["input"]) for s in speech.spoken[said:]]
        finally:
            meter.uninstall()
        if telegram.notices:
            raise RuntimeError(f"a file could not be opened: {telegram.notices[0]}")
        transcribed = len(speech.uploads)
    summary = summarize(results) if "text" in results else {}
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "messages_per_kind": messages,
        "sessions_per_kind": sessions,
        "solo_per_kind": solo,
        "client_concurrency": concurrency,
        "think_seconds": think,
        "files": {
            "photo_bytes": len(PHOTO),
            "voice_bytes": len(VOICE),
            "pdf_bytes": len(PDF),
            "outbound_photo_bytes": len(CHART),
        },
        "transcriptions": transcribed,
        "speech": speech_cost(spoken),
        "media_cost_per_million_usd": {k: v["usd_per_million"] for k, v in summary.items() if k != "text"},
        "text_cost_per_million_usd": summary.get("text", {}).get("usd_per_million"),
        "limits": {"dynamodb_item_bytes": ITEM_LIMIT_BYTES, "workflow_state_bytes": STATE_LIMIT_BYTES},
        "limits_ok": all(v["limits_ok"] for v in summary.values()),
        "summary": summary,
        "kinds": results,
        "prices_recorded": PRICES["recorded"],
        "excluded": EXCLUDED,
        "seconds": round(time.perf_counter() - started, 1),
    }


def speech_cost(spoken: dict[str, list[int]]) -> dict[str, Any]:
    """Per kind whose answers were spoken: the characters an answer sent to the speech API and
    what a million such answers cost there (SPEECH_USD_PER_MILLION_CHARACTERS), outside the AWS total."""
    out: dict[str, Any] = {"usd_per_million_characters": SPEECH_USD_PER_MILLION_CHARACTERS}
    for kind, lengths in spoken.items():
        if lengths:
            characters = sum(lengths) / len(lengths)
            out[kind] = {
                "answers_spoken": len(lengths),
                "characters_per_answer": round(characters),
                "speech_usd_per_million_messages": round(characters * SPEECH_USD_PER_MILLION_CHARACTERS, 2),
                "polly_usd_per_million_messages": {
                    engine: round(characters * price, 2) for engine, price in POLLY_USD_PER_MILLION_CHARACTERS.items()
                },
            }
    return out


EXCLUDED = [
    "the model's tokens (an image part, a document's text and a transcript are input tokens)",
    "the speech API's price per character of a spoken answer: reported apart (speech), a model cost",
    "the transcription's own price (per audio minute at the speech to text provider); its wait is one "
    "external round trip (150 ms) in the Lambda CPU model, while a real transcription takes about a "
    "second or more: each second the agent waits adds not_in_total.model_wait_usd_per_million_per_model_second "
    "of message_cost (Lambda at the agent's memory, plus Express duration)",
    "platform-side costs (Telegram's file hosting and upload), data transfer out of AWS (the sendPhoto upload "
    "to Telegram, the model request carrying the image); transfer in is free",
    "free tiers; S3 storage is reported apart (s3_storage), for media.retention_days",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=60, help="messages of each kind")
    parser.add_argument("--sessions", type=int, default=10, help="sessions of each kind")
    parser.add_argument("--solo", type=int, default=3, help="messages of each kind measured alone first")
    parser.add_argument("--concurrency", type=int, default=10, help="sessions talking at once")
    parser.add_argument("--think", type=float, default=0.5)
    parser.add_argument("--kinds", nargs="*", default=list(KINDS), choices=KINDS)
    parser.add_argument("--quick", action="store_true", help="16 messages of each kind over 4 sessions, 2 alone")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.sessions, args.solo = 16, 4, 2
    kinds = tuple(args.kinds) if "text" in args.kinds else ("text", *args.kinds)
    report = run(args.messages, args.sessions, args.solo, args.concurrency, args.think, kinds)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "media-cost-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{len(kinds)} kinds x {args.messages} messages in {report['seconds']} s; limits_ok: {report['limits_ok']}")
    for name, row in report["summary"].items():
        print(
            f"  {name:<15} {row['usd_per_million']:7.2f} USD/M (+{row['s3_storage_usd_per_million']:.2f} storage)"
            f"  delta {row['delta_vs_text_usd_per_million']:+6.2f}  requests {row['aws_requests_per_message']:5.2f}"
            f"  item {row['largest_dynamodb_item_bytes']} B  state {row['largest_workflow_state_bytes']} B"
        )
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
