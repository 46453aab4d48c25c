"""The whole gateway under injected faults and concurrent load, in local mode.

Local mode runs in-process (moto as the AWS, the handlers, a stream poller as Lambda's event
source mapping on the inbox, asynchronous invokes on worker threads with Lambda's retries, Step
Functions executions inside moto) with a fake Telegram and a fake OpenAI-compatible model on
loopback. Chats send numbered messages concurrently, each chat in order and waiting for
its acknowledgement, as Telegram does; the model echoes the message, so every reply names the
message it answers.

Two bots serve the chats (docs/profiles.md): the deployment's own, and a named profile's, `coder`,
with a bot token and webhook secret of its own. Every `coder_every`-th session (sessions 1, 5, 9,
… at the default 4) talks to the coder bot through `/p/coder/webhooks/telegram`, the others to
`/webhooks/telegram`. Each bot numbers its updates from the same start, so the two bots' update
ids overlap (both send an update 100001, …): the ingress's per-profile event ids keep them apart,
under every fault below. The fake Telegram accepts both tokens and records which one each send
used; every chat is one session's, so each reply's bot can be checked against the session's.
Faults are injected at the adapters:

- AWS: a fraction of the DynamoDB (the ingress's PutItem on the inbox among them: answered 503, the
  platform retries), Lambda (Invoke of the delivery function; the workflow tasks' invokes of the
  agent and delivery functions), SQS (SendMessage to the dead letters) and Step Functions
  (StartExecution) calls the functions make raise the service's throttling error, as a call
  whose SDK retries were exhausted would (`botocore.client.BaseClient._make_api_call`
  is wrapped; the calls of local mode's pollers and of this harness are left alone);
- the model answers some requests with 429, 500 or too slowly (GATEWAY_PROVIDER_TIMEOUT_SECONDS);
- Telegram answers some sends with 429, 500, too slowly (the sender's timeout is 3 s here; the fake
  posts nothing before a timed-out answer) or a permanent 400 (dead-lettered at once, by design;
  the fake refuses that chat's message again on every later try, as the Bot API's 400s do).
  A send the fake does post can still be answered after the timeout when this machine is loaded:
  the platform posted, the sender counted it failed and the outbox sent it again (BEHAVIOUR §6
  retries timeouts; the Bot API has no idempotency key). The report counts those duplicates apart
  (`duplicates_after_a_late_platform_answer`: a post no outbox row holds, of a text a send that
  timed out carried, during that send or up to 30 s after it, from each send's span as the sender
  saw it);
  `duplicate_replies_unexplained` is every other duplicate;
- a turn task crashes once after doing its work: with an error Step Functions retries
  (`Lambda.ServiceException`: the task runs twice) or with one it does not (`Sandbox.Timedout`, a
  function that timed out after its write: the workflow's Fail state runs);
- duplicates: an update sent twice at once, a later duplicate of an earlier message, an earlier
  message put back in the inbox as a new item (as a redrive does: it reaches the router again, out
  of order), a stream batch handed to the router twice (Lambda retries a batch, or hands it over
  again), an asynchronous delivery invoke run twice (Lambda's at-least-once); the delivery
  function runs as `delivery_workers` instances at once, each its own copy of the handler module.

Time is compressed by the profile's `time_scale` (10 at full size, 20 in CI): the router's pause
before a stream batch is retried, Lambda's asynchronous retry delays (about 60 and 120 s) and the
outbox's stale-claim age are divided by it, so their ratios stay as deployed; Step Functions'
retry intervals and the model and platform timeouts are real. Outcomes are counted from the
platform's side (the fake Telegram's accepted messages, in order), the outbox, the executions'
input (the turn and the messages it answers), and the dead-letter queue; nothing depends on how
the turn engine works inside:

- received: messages acknowledged 200 by the webhook; turns: the turns run (their executions'
  outcomes and, for failed ones, the error the Fail state got); replies: messages the platform
  accepted: answers (the model echoes what it answers, so an answer names its messages; messages
  queued behind a running turn are answered together), apologies (an outbox row of a turn) and
  notices (the router's own replies, such as "still working on your previous message");
- duplicate_replies: a reply (answer, apology or notice) posted more than once for one message;
  duplicates_after_a_late_platform_answer: of those, the ones the platform posted for a send that
  timed out at the sender; duplicate_replies_unexplained: the others (must be 0);
  answered_and_apologized: messages that got both;
- lost: acknowledged, never answered (no answer, no apology) and in no dead-letter queue;
- order_violations: answers that reached a chat after the answer to a later message of that chat;
  handed_to_delivery_function: the turns (their event ids) whose answer Finish handed to the
  asynchronous retries after the Deliver task's ran out, the one case the workflow lets a later
  answer pass (infra/statemachines/turn.asl.json);
- wrong_bot: replies (answers, apologies, notices) the platform accepted for a session's chat
  through a bot other than the session's (the deployment's token on a coder chat, or the
  reverse); replies_by_bot and received_by_bot count each bot's share;
- dead_lettered: entries in the shared dead-letter queue, each with its kind and reason (a refused
  delivery, a message the router gave up on, an asynchronous delivery out of retries, a stream
  batch the mapping gave up on: its messages read back through the stream);
- log_scan: the functions' log lines at DEBUG and everything written to standard error (local mode's
  notes on failed invocations, as Lambda would log an unhandled error) hold no secret (both bots'
  tokens and webhook secrets, the model's key) and no message text.

Usage: .venv/bin/python bench/faults.py [--size full|ci] [--seed S] [--sessions N] [--messages M]
Writes bench/results/faults-latest.json.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import itertools
import json
import logging
import os
import random
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from tests.fakes.loopback import ScriptedAnswer  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, completion  # noqa: E402
from tests.fakes.telegram_server import SERVER_ERROR, FakeTelegram, too_many_requests  # noqa: E402

WEBHOOK_SECRET = "faults-webhook-secret-" + hashlib.sha256(b"webhook").hexdigest()[:16]
BOT_TOKEN = "7000001:FAULTS-" + hashlib.sha256(b"bot").hexdigest()[:24]
# A second bot from the same deployment: the named profile `coder`, with secrets of its own
CODER = "coder"
CODER_WEBHOOK_SECRET = "faults-coder-webhook-secret-" + hashlib.sha256(b"coder-webhook").hexdigest()[:16]
CODER_BOT_TOKEN = "7000002:FAULTS-" + hashlib.sha256(b"coder-bot").hexdigest()[:24]
MAIN = "main"  # the deployment's own bot
BOTS = {  # bot -> (webhook path, webhook secret, bot token)
    MAIN: ("/webhooks/telegram", WEBHOOK_SECRET, BOT_TOKEN),
    CODER: (f"/p/{CODER}/webhooks/telegram", CODER_WEBHOOK_SECRET, CODER_BOT_TOKEN),
}
API_KEY = "sk-faults-" + hashlib.sha256(b"key").hexdigest()[:32]
# The sender's timeout (10 s deployed). Not compressed tenfold like the retry pauses: the fake's own
# latency is not, and on 2 loaded cores it reached 1.9 s (p95 0.86 s), so a 1-s timeout made the
# harness answer late sends it had not chosen to fault (each one a duplicate, by the rule above).
PLATFORM_TIMEOUT_SECONDS = 3.0
PROVIDER_TIMEOUT_SECONDS = 1
DYNAMODB_OPERATIONS = frozenset(
    {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "TransactWriteItems", "TransactGetItems"}
)
OUTBOX_STATUSES = frozenset({"sending", "sent", "failed", "dead_lettered", "unknown", "gone", "recorded"})
SQS_OPERATIONS = frozenset({"SendMessage"})
LAMBDA_OPERATIONS = frozenset({"Invoke"})
SFN_OPERATIONS = frozenset({"StartExecution"})
RETRIED_CRASH = "Lambda.ServiceException"  # Step Functions retries it: the task runs again
LAMBDA_THROTTLED = "Lambda.TooManyRequestsException"  # a task's invoke refused: the workflow retries it
UNRETRIED_CRASH = "Sandbox.Timedout"  # what Lambda reports for a function that timed out: caught, Fail runs


@dataclass(frozen=True)
class Profile:
    """How much traffic and how many faults; probabilities are per call, request or event."""

    sessions: int
    messages: int  # per session, sent in order
    senders: int  # chats sending at the same time
    dynamodb_throttle: float = 0.02  # per DynamoDB call a function makes
    inbox_throttle: float = 0.05  # per inbox write of the ingress (its one call: answered 503, retried)
    sqs_throttle: float = 0.03  # per SendMessage (to the dead letters) a function makes
    lambda_throttle: float = 0.03  # per Invoke (of the delivery function) a function makes
    task_throttle: float = 0.03  # per invoke of a workflow task (the agent's steps, Deliver's list)
    sfn_throttle: float = 0.03  # per StartExecution
    provider_faults: tuple[tuple[str, float], ...] = (("rate_limited", 0.05), ("server_error", 0.05), ("timeout", 0.03))
    platform_faults: tuple[tuple[str, float], ...] = (
        ("rate_limited", 0.05),
        ("server_error", 0.05),
        ("timeout", 0.03),
        ("refused", 0.01),
    )
    crash_retried: float = 0.03  # per turn task
    crash_unretried: float = 0.01  # per turn task
    webhook_duplicate_concurrent: float = 0.1  # per message
    webhook_duplicate_late: float = 0.1  # per message: an earlier message of the chat sent again
    inbound_redelivery: float = 0.05  # per message: an earlier one put back in the inbox (a redrive)
    stream_batch_duplicate: float = 0.1  # per stream batch: handed to the router twice
    delivery_job_duplicate: float = 0.1  # per asynchronous delivery invoke: run twice
    delivery_workers: int = 3  # instances of the delivery function (copies of its module)
    coder_every: int = 4  # sessions 1, 1 + n, 1 + 2n, … talk to the coder bot, the others to the deployment's
    # Each kind of fault is forced at its n-th chance when the dice have not drawn it by then (0:
    # never), so a short run has every kind however the threads' timing hands out the draws
    sure_by: int = 0
    time_scale: int = 10  # retry pauses, Lambda's async retry delays and the outbox's stale-claim age: divided by this
    think_seconds: float = 0.3  # at most this long between two messages of a chat
    deadline_seconds: float = 420.0  # to reach quiescence after the last message


SIZES = {
    "full": Profile(sessions=40, messages=10, senders=10),
    # Fewer messages, so higher rates: every kind of fault still happens in a run.
    "ci": Profile(
        sessions=6,
        messages=4,
        senders=6,
        sqs_throttle=0.06,
        lambda_throttle=0.06,
        # a turn without tools is one task invoke (Respond): ~24 in a run, so 0.2 for a throttled
        # one to happen in all but about one run in 200 (each Respond is tried up to 5 times on it)
        task_throttle=0.2,
        inbox_throttle=0.15,
        sfn_throttle=0.06,
        # ~24 messages make ~25 model calls and ~30 sends: at the full run's rates a run without
        # any provider or platform fault, or without a duplicate webhook, was a few percent likely
        provider_faults=(("rate_limited", 0.08), ("server_error", 0.08), ("timeout", 0.04)),
        platform_faults=(("rate_limited", 0.08), ("server_error", 0.08), ("timeout", 0.04), ("refused", 0.02)),
        webhook_duplicate_concurrent=0.25,
        stream_batch_duplicate=0.25,
        # few jobs are asynchronous invokes (the router's notices and answers): each one runs twice
        delivery_job_duplicate=1.0,
        crash_retried=0.06,
        crash_unretried=0.03,
        think_seconds=0.1,
        sure_by=4,
        time_scale=20,
        deadline_seconds=120.0,
    ),
}


# --- fault injection --------------------------------------------------------------------------


class Faults:
    """Seeded dice (shared by threads, so the sequence depends on timing), what was injected, and
    which function the current thread is running (faults go to the functions' calls only)."""

    def __init__(self, profile: Profile, seed: int) -> None:
        self.profile = profile
        self.seed = seed
        self.injected: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._crashed: set[tuple[str, str]] = set()
        self._chances: Counter[str] = Counter()  # kind of fault -> draws made for it
        self._drawn: Counter[str] = Counter()  # kind of fault -> draws that injected it
        # each text send the gateway made: chat id, text, started, ended (time.time()), how it ended
        self.sends: list[tuple[str, str, float, float, str]] = []

    def roll(self, probability: float, kind: str) -> bool:
        """One chance of a fault of `kind`: the dice, or `profile.sure_by`."""
        with self._lock:
            return self._decide(kind, self._rng.random() < probability)

    def pick(self, table: tuple[tuple[str, float], ...], kind: str) -> str | None:
        """One chance of a fault of `kind`: which fault of the table, if any (forced: the first)."""
        with self._lock:
            roll = self._rng.random()
            edge = 0.0
            for name, probability in table:
                edge += probability
                if roll < edge:
                    return name if self._decide(kind, True) else None
            return table[0][0] if self._decide(kind, False) else None

    def _decide(self, kind: str, drawn: bool) -> bool:
        """The draw for one chance of `kind`, forced true at its `sure_by`-th chance if it never
        came true before; called with the lock held."""
        self._chances[kind] += 1
        forced = self.profile.sure_by == self._chances[kind] and not self._drawn[kind]
        if drawn or forced:
            self._drawn[kind] += 1
        return drawn or forced

    def count(self, name: str) -> None:
        with self._lock:
            self.injected[name] += 1

    def sent(self, chat_id: str, text: str, started: float, outcome: str) -> None:
        with self._lock:
            self.sends.append((chat_id, text, started, time.time(), outcome))

    @property
    def function(self) -> str | None:
        return getattr(self._local, "function", None)

    @contextlib.contextmanager
    def inside(self, function: str | None) -> Iterator[None]:
        """Calls made in this block are `function`'s (None: the harness's own, never faulted)."""
        previous = self.function
        self._local.function = function
        try:
            yield
        finally:
            self._local.function = previous

    def aws_fault(self, service: str, operation: str, params: dict[str, Any]) -> Exception | None:
        """The throttling error to raise instead of this call, if the dice say so."""
        if self.function is None:
            return None
        odds = self.profile.inbox_throttle if self.function == "ingress" else self.profile.dynamodb_throttle
        chance = "dynamodb:ingress" if self.function == "ingress" else "dynamodb"
        if service == "dynamodb" and operation in DYNAMODB_OPERATIONS and self.roll(odds, chance):
            self.count(f"dynamodb_throttled:{self.function}:{operation}:{_what(params)}")
            return _dynamodb_throttle(operation, params)
        if service == "sqs" and operation in SQS_OPERATIONS and self.roll(self.profile.sqs_throttle, "sqs"):
            self.count(f"sqs_throttled:{self.function}:{operation}")
            return _client_error(operation, "ThrottlingException", "Rate exceeded")
        if service == "lambda" and operation in LAMBDA_OPERATIONS and self.roll(self.profile.lambda_throttle, "lambda"):
            self.count(f"lambda_throttled:{self.function}:{operation}:{params.get('InvocationType')}")
            return _client_error(operation, "TooManyRequestsException", "Rate exceeded")
        if (
            service == "stepfunctions"
            and operation in SFN_OPERATIONS
            and self.roll(self.profile.sfn_throttle, "stepfunctions")
        ):
            self.count(f"stepfunctions_throttled:{self.function}:{operation}")
            return _client_error(operation, "ThrottlingException", "Rate exceeded")
        return None

    def crash(self, event: dict[str, Any]) -> Exception | None:
        """Once per (turn, task), by a draw of its own: the error the task fails with after its work."""
        # the task's event is {"step", "state": {"turn": ...}} (it was read from the top: every turn
        # drew as "None", so a run crashed each step at most once)
        turn = ((event.get("state") or {}).get("turn")) or {}
        step, turn_id = str(event.get("step")), str(turn.get("turn_id"))
        with self._lock:
            if (turn_id, step) in self._crashed:
                return None
            draw = random.Random(f"{self.seed}:{turn_id}:{step}").random()
            limit = self.profile.crash_retried + self.profile.crash_unretried
            if not self._decide("crash", draw < limit):
                return None
            unretried = self.profile.crash_retried <= draw < limit  # a forced crash is a retried one
            kind = UNRETRIED_CRASH if unretried else RETRIED_CRASH
            self._crashed.add((turn_id, step))
            self.injected[f"crash_after_work:{kind}:{step}"] += 1
        crash: Exception = type(kind, (Exception,), {})(f"injected: the {step} task failed after doing its work")
        return crash


def _what(params: dict[str, Any]) -> str:
    """The table a DynamoDB call is for, and for the outbox's status writes which one it is."""
    tables = [params.get("TableName")] + [
        op.get("TableName") for item in params.get("TransactItems") or [] for op in item.values()
    ]
    names = sorted({str(t).removeprefix("hermes-local-") for t in tables if t})
    values = {str(v.get("S")) for v in (params.get("ExpressionAttributeValues") or {}).values() if isinstance(v, dict)}
    if names == ["outbox"] and "Item" in params:
        return "outbox(record+claim)"
    if names != ["outbox"] or not values & OUTBOX_STATUSES:
        return "+".join(names)
    if "pending" in values:
        return "outbox(claim)"
    if "sending" in values:
        return "outbox(settle stale claim)"
    return "outbox(mark " + "/".join(sorted(values & OUTBOX_STATUSES)) + ")"


def _client_error(operation: str, code: str, message: str, **extra: Any) -> Exception:
    from botocore.exceptions import ClientError

    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 400}, **extra}
    error: Exception = ClientError(response, operation)  # type: ignore[arg-type]
    return error


def _dynamodb_throttle(operation: str, params: dict[str, Any]) -> Exception:
    if operation == "TransactWriteItems":
        items = len(params.get("TransactItems") or [None])
        reasons = [{"Code": "ThrottlingError", "Message": "Throughput exceeds the current capacity"}]
        reasons += [{"Code": "None"}] * (items - 1)
        return _client_error(
            operation, "TransactionCanceledException", "Transaction cancelled", CancellationReasons=reasons
        )
    return _client_error(
        operation,
        "ProvisionedThroughputExceededException",
        "The level of configured provisioned throughput was exceeded",
    )


@dataclass
class FaultyTelegram(FakeTelegram):
    """The Bot API answering some sends with a fault; a timed-out send posts nothing. A message it
    refused (a 400) it refuses again on every try, as the Bot API's 400s answer the request itself
    ("message is too long", "can't parse entities"), not a moment of the server."""

    thread_name: ClassVar[str] = "fake-telegram-faults"
    faults: Faults | None = None
    refused: set[tuple[str, str]] = field(default_factory=set)  # (chat id, text) of each message refused

    def _default_answer(self, request: Any) -> ScriptedAnswer:
        message = _chat_and_text(request) if request.api_method == "sendMessage" else None
        if message is not None and message in self.refused:
            return _REFUSED
        fault = self.faults.pick(self.faults.profile.platform_faults, "platform") if self.faults else None
        if request.api_method != "sendMessage" or fault is None:
            posted = len(self.sent)
            answer = super()._default_answer(request)
            if len(self.sent) > posted:
                self.sent[-1]["at"] = time.time()
            return answer
        self.faults.count(f"platform:{fault}")  # type: ignore[union-attr]
        if fault == "rate_limited":
            return ScriptedAnswer(429, too_many_requests(1))
        if fault == "server_error":
            return ScriptedAnswer(500, SERVER_ERROR)
        if fault == "timeout":
            return ScriptedAnswer(502, SERVER_ERROR, delay=PLATFORM_TIMEOUT_SECONDS + 0.5)
        if message is not None:
            self.refused.add(message)
        return _REFUSED


_REFUSED = ScriptedAnswer(400, {"ok": False, "error_code": 400, "description": "Bad Request: message refused"})


def _chat_and_text(request: Any) -> tuple[str, str] | None:
    body = request.json if isinstance(request.json, dict) else None
    return (str(body.get("chat_id")), str(body.get("text"))) if body is not None else None


@dataclass
class EchoingOpenAI(FakeOpenAI):
    """A model that answers "Echo: <the user's last message>", or with a fault."""

    thread_name: ClassVar[str] = "fake-openai-faults"
    faults: Faults | None = None

    def _default_answer(self, request: Any) -> ScriptedAnswer:
        messages = (request.json or {}).get("messages") or [{}]
        answer = ScriptedAnswer(200, completion("Echo: " + str(messages[-1].get("content"))))
        fault = self.faults.pick(self.faults.profile.provider_faults, "provider") if self.faults else None
        if fault is None:
            return answer
        self.faults.count(f"provider:{fault}")  # type: ignore[union-attr]
        if fault == "rate_limited":
            return ScriptedAnswer(429, {"error": {"message": "Rate limit reached"}}, headers={"Retry-After": "1"})
        if fault == "server_error":
            return ScriptedAnswer(500, {"error": {"message": "The server had an error"}})
        return replace(answer, delay=PROVIDER_TIMEOUT_SECONDS + 0.5)


@contextlib.contextmanager
def patched(faults: Faults) -> Iterator[None]:
    """The AWS fault injector, compressed retry pauses and stale-claim age, a short platform
    timeout, stream batches handed over twice and asynchronous invokes run twice."""
    from botocore.client import BaseClient

    from hermes_gateway.adapters.dynamo_outbox import SEND_CLAIM_SECONDS, DynamoOutbox
    from hermes_gateway.platforms import telegram
    from hermes_gateway.services import consumer
    from hermes_local.aws import AsyncInvokes
    from hermes_local.pollers import StreamPoller

    original_call = BaseClient._make_api_call
    original_pause = consumer.retry_pause_seconds
    original_sender = telegram.build_sender
    original_settle = DynamoOutbox.settle_stale
    original_submit = AsyncInvokes.submit
    original_batch = StreamPoller._invoke

    def make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
        fault = faults.aws_fault(client.meta.service_model.service_name, operation, params)
        if fault is not None:
            raise fault
        return original_call(client, operation, params)

    def retry_pause_seconds(age_seconds: float, floor_seconds: float, cap_seconds: float) -> float:
        return original_pause(age_seconds, floor_seconds, cap_seconds) / faults.profile.time_scale

    def settle_stale(
        outbox: Any, delivery_id: str, now: float, stale_after_seconds: float = SEND_CLAIM_SECONDS
    ) -> bool:
        return bool(original_settle(outbox, delivery_id, now, stale_after_seconds / faults.profile.time_scale))

    def submit(runner: Any, name: str, handler: Any, event: dict[str, Any], context_for: Any) -> None:
        original_submit(runner, name, handler, event, context_for)
        if faults.roll(faults.profile.delivery_job_duplicate, "delivery_invoked_twice"):
            faults.count("delivery_invoked_twice")  # Lambda runs an asynchronous event at least once
            original_submit(runner, name, handler, event, context_for)

    def invoke_batch(poller: Any, lane: Any, batch: list[dict[str, Any]]) -> int:
        if faults.roll(faults.profile.stream_batch_duplicate, "stream_record_delivered_twice"):
            faults.count("stream_record_delivered_twice")  # the same batch once more, before it counts
            original_batch(poller, lane, batch)
        return int(original_batch(poller, lane, batch))

    class TimedSender(telegram.TelegramSender):
        """Records each text send's time span and outcome, so a post the platform made after the
        sender had timed out can be told from one the gateway sent twice."""

        def send_text(self, chat_id: str, text: str, **options: Any) -> str:
            started, outcome = time.time(), "sent"
            try:
                return super().send_text(chat_id, text, **options)
            except Exception as exc:
                outcome = f"{type(exc).__name__}: {exc}"[:120]
                raise
            finally:
                faults.sent(str(chat_id), text, started, outcome)

    def build_sender(context: Any) -> Any:
        token = context.secret("TELEGRAM_BOT_TOKEN")
        return TimedSender(context.platform.api_base_url, token, timeout=PLATFORM_TIMEOUT_SECONDS)

    BaseClient._make_api_call = make_api_call  # type: ignore[method-assign,assignment]
    consumer.retry_pause_seconds = retry_pause_seconds  # type: ignore[assignment]
    telegram.build_sender = build_sender  # type: ignore[assignment]
    DynamoOutbox.settle_stale = settle_stale  # type: ignore[method-assign,assignment]
    AsyncInvokes.submit = submit  # type: ignore[method-assign]
    StreamPoller._invoke = invoke_batch  # type: ignore[method-assign]
    try:
        yield
    finally:
        BaseClient._make_api_call = original_call  # type: ignore[method-assign,assignment]
        consumer.retry_pause_seconds = original_pause
        telegram.build_sender = original_sender
        DynamoOutbox.settle_stale = original_settle  # type: ignore[method-assign,assignment]
        AsyncInvokes.submit = original_submit  # type: ignore[method-assign]
        StreamPoller._invoke = original_batch  # type: ignore[method-assign]


def instrument(gateway: Any, faults: Faults) -> None:
    """Mark each function's thread while it runs (its AWS calls may be faulted); the agent's tasks
    may crash after their work; the delivery function runs as several instances."""

    def marked(name: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        def call(event: dict[str, Any], context: Any) -> Any:
            # A workflow task's invoke (the agent's steps, Deliver's `deliveries`) refused by Lambda:
            # the task fails with Lambda's throttling error, which its Retry takes
            task = name == "agent" or (name == "delivery" and "deliveries" in event)
            if task and faults.roll(faults.profile.task_throttle, "lambda"):
                faults.count(f"lambda_throttled:stepfunctions:{name}:{event.get('step') or 'deliver'}")
                raise type(LAMBDA_THROTTLED, (Exception,), {})("Rate exceeded")
            with faults.inside(name):
                result = handler(event, context)
            crash = faults.crash(event) if name == "agent" else None
            if crash is not None:
                raise crash
            return result

        return call

    gateway.functions.handlers["delivery"] = Instances("delivery", faults.profile.delivery_workers)
    for name, handler in list(gateway.functions.handlers.items()):
        gateway.functions.handlers[name] = marked(name, handler)


class Instances:
    """Several instances of one function, as Lambda runs them at once: each its own copy of the
    handler module (its own globals, such as the delivery service's memory of unrecorded claims),
    the invocations spread over them in turn."""

    def __init__(self, name: str, count: int) -> None:
        from hermes_gateway.resources import function

        spec = function(name)
        module_file = spec.handler.split(".", 1)[0]
        self._handlers = []
        for index in range(max(1, count)):
            module_spec = importlib.util.spec_from_file_location(
                f"hermes_faults_{name}_{index}", ROOT / spec.code_dir / f"{module_file}.py"
            )
            assert module_spec is not None and module_spec.loader is not None
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            self._handlers.append(module.lambda_handler)
        self._next = itertools.cycle(range(len(self._handlers)))
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        with self._lock:
            index = next(self._next)
        return self._handlers[index](event, context)


# --- traffic ----------------------------------------------------------------------------------


@dataclass
class Message:
    session: int
    n: int
    update_id: int  # numbered per bot: the coder bot's updates reuse the deployment bot's numbers
    chat_id: int
    text: str
    bot: str = MAIN  # MAIN or CODER: the bot the chat talks to
    accepted: bool = False
    accepted_at: float = 0.0
    envelope: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return f"s{self.session}m{self.n}"

    @property
    def ref(self) -> tuple[str, int]:
        """The bot and the update id: what identifies the message across both bots."""
        return (self.bot, self.update_id)

    @property
    def event_id(self) -> str | None:
        """The platform event id the ingress gave it (seen on its way into the inbox)."""
        return str(self.envelope["event_id"]) if self.envelope else None

    def update(self) -> dict[str, Any]:
        return {
            "update_id": self.update_id,
            "message": {
                "message_id": self.n,
                "date": int(time.time()),
                "chat": {"id": self.chat_id, "type": "private", "first_name": f"S{self.session}"},
                "from": {"id": self.chat_id, "is_bot": False, "first_name": f"S{self.session}"},
                "text": self.text,
            },
        }


@dataclass
class Traffic:
    """The chats: each sends its messages in order, retrying each until it is acknowledged, as
    Telegram does, plus the duplicates the profile asks for."""

    url: str
    faults: Faults
    messages: list[Message] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)  # webhook status codes seen
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def build(self, profile: Profile, seed: int) -> None:
        rng = random.Random(seed)
        chats: Counter[str] = Counter()  # each bot numbers its chats' updates from the same start
        for s in range(profile.sessions):
            bot = CODER if s % profile.coder_every == 1 else MAIN
            first = 100_000 + chats[bot] * 1000
            chats[bot] += 1
            for n in range(1, profile.messages + 1):
                tag = "".join(rng.choice("abcdefghjkmnpqrstuvwxyz23456789") for _ in range(6))
                self.messages.append(Message(s, n, first + n, 9_000_000 + s, f"s{s} m{n} {tag}", bot))

    def post(self, message: Message, deadline: float) -> bool:
        body = json.dumps(message.update()).encode()
        path, secret, _ = BOTS[message.bot]
        headers = {"content-type": "application/json", "x-telegram-bot-api-secret-token": secret}
        pause = 0.2
        while time.time() < deadline:
            request = urllib.request.Request(self.url + path, body, headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    status = response.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            except OSError:
                status = 0
            with self._lock:
                self.answers[str(status)] += 1
            if status == 200:
                message.accepted_at = message.accepted_at or time.time()
                message.accepted = True
                return True
            time.sleep(pause)
            pause = min(pause * 2, 2.0)
        return False

    def post_concurrently(self, message: Message, deadline: float) -> None:
        barrier = threading.Barrier(2)

        def twice() -> None:
            barrier.wait()
            self.post(message, deadline)

        threads = [threading.Thread(target=twice) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def chat(
        self, session: int, profile: Profile, seed: int, deadline: float, redeliver: Callable[[Message], None]
    ) -> None:
        rng = random.Random(f"{seed}:chat:{session}")
        mine = [m for m in self.messages if m.session == session]
        for i, message in enumerate(mine):
            if rng.random() < profile.webhook_duplicate_concurrent:
                self.faults.count("webhook_sent_twice_at_once")
                self.post_concurrently(message, deadline)
            else:
                self.post(message, deadline)
            if i and rng.random() < profile.webhook_duplicate_late:
                self.faults.count("webhook_earlier_message_sent_again")
                self.post(rng.choice(mine[:i]), deadline)
            if i and rng.random() < profile.inbound_redelivery:
                redeliver(rng.choice(mine[:i]))
            time.sleep(rng.uniform(0, profile.think_seconds))


# --- the run ----------------------------------------------------------------------------------


class LogCapture(logging.Handler):
    """Every line the functions log, at every level, as CloudWatch would get it, and what the
    process writes to standard error (local mode's notes on crashed invocations)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.stderr = io.StringIO()
        self._logger: Any = None

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self._logger.registered_formatter.format(record))

    @contextlib.contextmanager
    def capturing(self) -> Iterator[LogCapture]:
        from hermes_gateway.observability import logger

        self._logger = logger
        std = logging.getLogger(logger.name)
        level, quiet = std.level, [(h, h.level) for h in std.handlers]
        for handler, _ in quiet:
            handler.setLevel(logging.CRITICAL + 1)  # the run's DEBUG lines are scanned, not printed
        std.addHandler(self)
        std.setLevel(logging.DEBUG)
        try:
            with contextlib.redirect_stderr(self.stderr):
                yield self
        finally:
            std.removeHandler(self)
            std.setLevel(level)
            for handler, handler_level in quiet:
                handler.setLevel(handler_level)

    def correlations(self, message: str) -> list[str]:
        """The correlation ids (a turn's platform event id) of the lines logging `message`."""
        found = []
        for line in self.lines:
            if message not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("message") == message:
                found.append(str(record.get("correlation_id")))
        return sorted(set(found))

    def scan(self, secrets: dict[str, str], texts: list[str]) -> dict[str, Any]:
        logged = "\n".join(self.lines)
        printed = self.stderr.getvalue()
        everything = logged + "\n" + printed
        return {
            "log_lines": len(self.lines),
            "stderr_lines": printed.count("\n"),
            "secrets_checked": sorted(secrets),
            "secrets_found": sorted(name for name, value in secrets.items() if value in everything),
            "message_texts_found": sum(1 for text in texts if text in everything),
        }


def _environ(telegram: FakeTelegram, openai: FakeOpenAI, state: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HERMES_LOCAL_STATE": str(state),
        "TELEGRAM_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "TELEGRAM_BOT_TOKEN": BOT_TOKEN,
        # The coder bot: Telegram on, everyone allowed, every other setting the deployment's
        "GATEWAY_PROFILES": json.dumps({CODER: {"TELEGRAM_ENABLED": "true", "TELEGRAM_ALLOW_ALL_USERS": "true"}}),
        "TELEGRAM_WEBHOOK_SECRET__CODER": CODER_WEBHOOK_SECRET,
        "TELEGRAM_BOT_TOKEN__CODER": CODER_BOT_TOKEN,
        "TELEGRAM_API_BASE_URL": telegram.base_url,
        "GATEWAY_PROVIDER": "openai",
        "GATEWAY_MODEL": "faults-model",
        "OPENAI_BASE_URL": openai.base_url,
        "OPENAI_API_KEY": API_KEY,
        "GATEWAY_PROVIDER_TIMEOUT_SECONDS": str(PROVIDER_TIMEOUT_SECONDS),
        "GATEWAY_BUSY_RETRY_SECONDS": "1",
        # Its senders talk in several sessions at a pace no person keeps: the limits are checked
        # on every message (their reads and writes are in the run) and never reached.
        "GATEWAY_LIMIT_MESSAGES_PER_MINUTE": "1000000",
        "POWERTOOLS_LOG_LEVEL": "DEBUG",
    }


def _wait_quiet(gateway: Any, deadline: float) -> dict[str, float]:
    """Until nothing has been going on for three looks in a row (`LocalGateway.busy`: stream
    records not yet routed, asynchronous invokes not yet done, running turns); for how long after
    the last message each thing was still busy (`quiescent` false if the deadline came first)."""
    started, calm, last = time.time(), 0, {}
    while time.time() < deadline:
        busy = gateway.busy()
        for name in busy:
            last[name] = round(time.time() - started, 1)
        calm = 0 if busy else calm + 1
        if calm >= 3:
            return {"quiescent": True, **last}
        time.sleep(0.5)
    return {"quiescent": False, **last}


def _redeliverer(faults: Faults) -> Callable[[Message], None]:
    """Put an earlier message back in the inbox as a new item, as a redrive does: the stream hands
    it to the router again, after the session's later messages."""

    def redeliver(message: Message) -> None:
        from hermes_gateway import wiring

        if message.envelope is None:
            return
        faults.count("inbound_message_put_back")
        wiring.inbox().put_back(message.envelope)

    return redeliver


def _capture_envelopes(traffic: Traffic) -> Callable[[], None]:
    """Keep each message's inbox envelope (for the redeliveries); returns the undo."""
    from hermes_gateway.adapters.dynamo_inbox import DynamoInbox

    by_ref = {m.ref: m for m in traffic.messages}
    current = DynamoInbox.put_once

    def put_once(inbox: Any, envelope: dict[str, Any]) -> bool:
        written = current(inbox, envelope)
        found = by_ref.get(_ref(envelope.get("event_id")) or ("", -1))
        if found is not None:
            found.envelope = envelope
        return written

    DynamoInbox.put_once = put_once  # type: ignore[method-assign]

    def undo() -> None:
        DynamoInbox.put_once = current  # type: ignore[method-assign]

    return undo


def run(profile: Profile, seed: int = 7, logs: Path | None = None) -> dict[str, Any]:
    """One run; returns the report (see `account`). `logs`: where to write the functions' log lines
    (they hold hashed ids only, as deployed) to look into a run."""
    import boto3

    from hermes_local.runtime import LocalGateway

    faults = Faults(profile, seed)
    capture = LogCapture()
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        telegram = stack.enter_context(FaultyTelegram(token=BOT_TOKEN, other_tokens=(CODER_BOT_TOKEN,), faults=faults))
        openai = stack.enter_context(EchoingOpenAI(faults=faults))
        state = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "local.json"
        stack.enter_context(patched(faults))
        stack.enter_context(capture.capturing())
        gateway = LocalGateway(
            port=0,
            environ=_environ(telegram, openai, state),
            tick_seconds=3600,
            poll_wait_seconds=1,
            # Lambda tries a failed asynchronous invoke again after about 60 and 120 s
            async_retry_delays=(60 / profile.time_scale, 120 / profile.time_scale),
        )
        gateway.start()
        stack.callback(gateway.stop)
        sfn = boto3.client("stepfunctions")
        instrument(gateway, faults)
        traffic = Traffic(gateway.url, faults)
        traffic.build(profile, seed)
        stack.callback(_capture_envelopes(traffic))
        send_deadline = time.time() + profile.deadline_seconds
        _send_all(traffic, profile, seed, send_deadline, _redeliverer(faults))
        sent_seconds = time.perf_counter() - started
        settled = _wait_quiet(gateway, time.time() + profile.deadline_seconds)
        report = account(traffic, telegram, sfn, faults.sends)
        report["log_scan"] = capture.scan(
            {
                "TELEGRAM_BOT_TOKEN": BOT_TOKEN,
                "TELEGRAM_WEBHOOK_SECRET": WEBHOOK_SECRET,
                "TELEGRAM_BOT_TOKEN__CODER": CODER_BOT_TOKEN,
                "TELEGRAM_WEBHOOK_SECRET__CODER": CODER_WEBHOOK_SECRET,
                "OPENAI_API_KEY": API_KEY,
            },
            [m.text for m in traffic.messages],
        )
        # Turns whose answer went to the asynchronous retries after the Deliver task's (Finish):
        # the one case a later answer may pass it (infra/statemachines/turn.asl.json, Deliver)
        from hermes_gateway.services.turn.finish import HANDED_TO_DELIVERY

        report["handed_to_delivery_function"] = capture.correlations(HANDED_TO_DELIVERY)
        if logs is not None:
            logs.write_text("\n".join(capture.lines) + "\n" + capture.stderr.getvalue(), encoding="utf-8")
        report.update(
            seed=seed,
            sessions=profile.sessions,
            messages_per_session=profile.messages,
            quiescent=settled.pop("quiescent"),
            busy_after_sending=settled,
            seconds_sending=round(sent_seconds, 1),
            seconds=round(time.perf_counter() - started, 1),
            faults_injected=dict(sorted(faults.injected.items())),
            webhook_answers=dict(sorted(traffic.answers.items())),
        )
    return report


def _send_all(
    traffic: Traffic, profile: Profile, seed: int, deadline: float, redeliver: Callable[[Message], None]
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=profile.senders, thread_name_prefix="chat") as pool:
        futures = [pool.submit(traffic.chat, s, profile, seed, deadline, redeliver) for s in range(profile.sessions)]
        for future in futures:
            future.result()


# --- accounting -------------------------------------------------------------------------------


def _update_id(event_id: str | None) -> int | None:
    tail = str(event_id or "").rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _ref(event_id: str | None) -> tuple[str, int] | None:
    """The bot and update id an event id names: a named profile's are `p:<profile>:telegram:…`."""
    text = str(event_id or "")
    update_id = _update_id(text)
    if update_id is None:
        return None
    return (text.split(":")[1] if text.startswith("p:") else MAIN, update_id)


@dataclass
class Turns:
    """The turns Step Functions ran, read from the executions' input (the documented turn input:
    `turn_id`, `event_id`, and the `queued` inputs a turn answers together)."""

    outcomes: Counter[str] = field(default_factory=Counter)  # execution status -> count
    failures: Counter[str] = field(default_factory=Counter)  # the error each failed execution's Fail state got
    answers: dict[str, set[tuple[str, int]]] = field(default_factory=lambda: defaultdict(set))  # turn id -> refs
    times: dict[str, tuple[float, float]] = field(default_factory=dict)  # turn id -> started, stopped
    # turn id -> its session and the transcript rows it answers (a handed-off turn answers queued
    # messages its input names by their rows only)
    user_rows: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)

    def resolve(self, messages: list[Message], transcript: Any) -> None:
        """Add to each turn the messages whose text its user rows hold (texts are unique per run)."""
        by_text = {m.text: m.ref for m in messages}
        rows_of: dict[str, list[Any]] = {}
        for turn_id, (session_id, seqs) in self.user_rows.items():
            rows = rows_of.setdefault(session_id, transcript.rows(session_id))
            wanted = set(seqs)
            for row in rows:
                if row.seq in wanted and row.role == "user" and row.content in by_text:
                    self.answers[turn_id].add(by_text[row.content])

    @classmethod
    def read(cls, sfn: Any) -> Turns:
        turns = cls()
        machine = os.environ["HERMES_TURN_STATE_MACHINE_ARN"]
        for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=machine):
            for execution in page["executions"]:
                described = sfn.describe_execution(executionArn=execution["executionArn"])
                started_with = json.loads(described.get("input") or "{}")
                turn = started_with.get("turn") if isinstance(started_with.get("turn"), dict) else started_with
                turn_id = str(turn.get("turn_id") or execution["name"])
                events = [turn.get("event_id")] + [q.get("event_id") for q in turn.get("queued") or []]
                turns.answers[turn_id].update(r for r in map(_ref, events) if r is not None)
                if turn.get("session_id") and turn.get("user_seqs"):
                    turns.user_rows[turn_id] = (str(turn["session_id"]), tuple(int(q) for q in turn["user_seqs"]))
                turns.outcomes[execution["status"]] += 1
                stop = execution.get("stopDate")
                started = turns.times.get(turn_id, (execution["startDate"].timestamp(), 0.0))[0]
                turns.times[turn_id] = (started, stop.timestamp() if stop else 0.0)
                if execution["status"] == "FAILED":
                    turns.failures[_failure(sfn, execution["executionArn"])] += 1
        return turns


def account(
    traffic: Traffic, telegram: FakeTelegram, sfn: Any, sends: Sequence[tuple[str, str, float, float, str]] = ()
) -> dict[str, Any]:
    """What became of every message, from what the platform accepted, the outbox, the dead-letter
    queues and the executions. `sends` are the gateway's send attempts as its sender saw them (chat,
    text, start, end, outcome): a post the platform made during an attempt that timed out is a late
    answer, which no Bot API call can tell from a lost send."""
    from hermes_gateway import wiring

    by_ref = {m.ref: m for m in traffic.messages}
    turns = Turns.read(sfn)
    turns.resolve(traffic.messages, wiring.session_stores().transcript)
    rows = wiring.outbox().recent(limit=10**9)
    bot_of = {token: bot for bot, (_, _, token) in BOTS.items()}
    with telegram._lock:
        sent = [{**s, "bot": bot_of.get(t, t[:8])} for s, t in zip(telegram.sent, telegram.sent_tokens, strict=True)]
    ledger = Ledger.read(sent, traffic.messages, rows, turns, sends)
    dead = _dead_letters(by_ref)
    wrong_bot = _wrong_bot(sent, traffic.messages)
    accepted = [m for m in traffic.messages if m.accepted]
    lost = [m.key for m in accepted if not ledger.answered(m.key) and m.key not in dead["messages"]]
    kinds = [kind for replies in ledger.replies.values() for kind in replies]
    return {
        "received": len(accepted),
        "received_by_bot": dict(sorted(Counter(m.bot for m in accepted).items())),
        "not_acknowledged": len(traffic.messages) - len(accepted),
        "turns": len(turns.answers),
        "turn_outcomes": dict(turns.outcomes),
        "turn_failures": dict(sorted(turns.failures.items())),
        "replies": len(sent),
        "replies_by_bot": dict(sorted(Counter(str(s["bot"]) for s in sent).items())),
        "wrong_bot": len(wrong_bot),
        "wrong_bot_replies": wrong_bot[:20],
        "answers": len([p for p in ledger.posted if p == "answer"]),
        "messages_answered_together": sum(1 for n in ledger.covered if n > 1),
        "apologies": kinds.count("apology"),
        "busy_notices": kinds.count("notice"),
        "unexpected_replies": ledger.unexpected,
        "duplicate_replies": sum(n - 1 for n in ledger.counts().values() if n > 1),
        # of those, replies the platform posted for a send that timed out at the sender: the
        # gateway retried a send it had to count as failed (BEHAVIOUR §6: timeouts retry)
        "duplicates_after_a_late_platform_answer": ledger.late_duplicates(),
        "duplicate_replies_unexplained": sum(n - 1 for n in ledger.counts().values() if n > 1)
        - ledger.late_duplicates(),
        "platform_sends": _send_spans(sends, ledger.late_posts),
        "duplicated": ledger.evidence([k for k, n in ledger.counts().items() if n > 1]),
        "answered_and_apologized": ledger.evidence(ledger.answered_and_apologized()),
        "lost": len(lost),
        "lost_messages": ledger.evidence(lost),
        "leases_held": _leases_held(sfn),
        "order_violations": sum(_violations(numbers) for numbers in ledger.per_chat.values()),
        "out_of_order": ledger.evidence(ledger.late()),
        "reply_order": {f"s{traffic_session(c)}": ns for c, ns in ledger.per_chat.items() if _violations(ns)},
        "reply_seconds": ledger.latency(),
        "slowest": ledger.evidence([ledger.latency().get("slowest")] if ledger.first_reply_at else []),
        "dead_lettered": dead["count"],
        "dlq": dead["entries"],
        "dlq_reasons": dict(Counter(e["reason"] for e in dead["entries"])),
    }


LATE_POST_SECONDS = 30.0  # how long after the sender gave up a loaded fake may still handle its request


def _posted_after_timeout(posted: dict[str, Any], sends: Sequence[tuple[str, str, float, float, str]]) -> bool:
    """Whether the platform accepted this post for a send of the same text to the same chat that
    the sender gave up on as timed out: while it waited, or after (the request was sent whole; a
    loaded server may read and handle it only once the sender has closed the connection)."""
    at = float(posted.get("at") or 0.0)
    chat, text = str(posted["chat_id"]), posted["text"]
    return any(
        c == chat and t == text and started <= at <= ended + LATE_POST_SECONDS and "timed out" in outcome
        for c, t, started, ended, outcome in sends
    )


def _send_spans(sends: Sequence[tuple[str, str, float, float, str]], late_posts: int) -> dict[str, Any]:
    """The gateway's text sends as its sender saw them: how long they took, how many timed out, and
    how many of those the platform had posted all the same (it answered after the timeout)."""
    spans = sorted(ended - started for _, _, started, ended, _ in sends)
    if not spans:
        return {"count": 0}

    def pick(q: float) -> float:
        return round(spans[min(len(spans) - 1, int(q * len(spans)))], 2)

    return {
        "count": len(spans),
        "seconds": {"p50": pick(0.5), "p95": pick(0.95), "max": round(spans[-1], 2)},
        "timed_out": sum(1 for *_, outcome in sends if "timed out" in outcome),
        "timed_out_but_posted": late_posts,
    }


@dataclass
class Ledger:
    """The replies each message got, in the order the platform accepted them. An answer names the
    messages it answers (the model echoes them; queued messages are answered together); an apology
    answers its turn's messages (found through its outbox row); any other reply with an outbox row
    of no turn is a notice from the router (busy, commands) about the message whose event id its
    delivery id is derived from."""

    messages: dict[str, Message]
    rows_of: dict[str, list[Any]]  # message key -> its turns' outbox rows
    replies: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # "answer"/"apology"/"notice"
    by_turn: dict[str, set[tuple[str, str]]] = field(default_factory=lambda: defaultdict(set))  # key -> (kind, turn)
    per_chat: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))  # message numbers, first replies
    posted: list[str] = field(default_factory=list)  # the kind of each reply the platform accepted
    covered: list[int] = field(default_factory=list)  # how many messages each answer or apology answered
    unexpected: list[dict[str, Any]] = field(default_factory=list)
    first_reply_at: dict[str, float] = field(default_factory=dict)
    turn_of: dict[str, str] = field(default_factory=dict)  # message key -> turn id
    turn_times: dict[str, tuple[float, float]] = field(default_factory=dict)  # turn id -> started, stopped
    # message key -> each reply: its time, and the outbox row the platform's message id names
    # (its turn and chunk), so a duplicated answer shows which turns sent it
    posts: dict[str, list[tuple[str, float, Any, bool]]] = field(default_factory=lambda: defaultdict(list))
    turns_of: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # key -> every turn answering it
    late_posts: int = 0  # posts the platform made for a send that timed out, no row holding their id

    @classmethod
    def read(
        cls,
        sent: list[dict[str, Any]],
        messages: list[Message],
        rows: list[Any],
        turns: Turns,
        sends: Sequence[tuple[str, str, float, float, str]] = (),
    ) -> Ledger:
        from hermes_gateway.services.turn import APOLOGY

        by_ref = {m.ref: m for m in messages}
        of_turn = {t: [by_ref[r] for r in sorted(rs) if r in by_ref] for t, rs in turns.answers.items()}
        rows_of: dict[str, list[Any]] = defaultdict(list)
        for row in rows:
            for message in of_turn.get(row.turn_id or "", []):
                rows_of[message.key].append(row)
        ledger = cls({m.key: m for m in messages}, rows_of, turn_times=turns.times)
        ledger.turn_of = {m.key: turn for turn, ms in of_turn.items() for m in ms}
        for turn, answered_by_turn in of_turn.items():
            for message in answered_by_turn:
                ledger.turns_of[message.key].append(turn[-8:])
        by_platform_id = {(r.chat_id, r.platform_message_id): r for r in rows if r.platform_message_id}
        by_event_hash = {hashlib.sha256(m.event_id.encode()).hexdigest()[:32]: m for m in messages if m.event_id}
        # An apology posted but never marked with its id (the mark failed; the row was settled
        # unknown): the chat's latest apology row recorded before the post.
        apologies = sorted((r for r in rows if r.text == APOLOGY), key=lambda r: r.created_at, reverse=True)
        for posted in sent:
            chat = str(posted["chat_id"])
            row = by_platform_id.get((chat, str(posted["message_id"])))
            # a late answer: a post the outbox never learned the id of (its send timed out), of a
            # text a timed-out send carried
            late = row is None and _posted_after_timeout(posted, sends)
            ledger.late_posts += late
            if posted["text"].startswith("Echo: "):
                kind = "answer"
                answered = [m for m in messages if str(m.chat_id) == chat and m.text in posted["text"]]
            elif posted["text"] == APOLOGY:
                kind = "apology"
                row = row or next((r for r in apologies if r.chat_id == chat and r.created_at <= posted["at"]), None)
                answered = of_turn.get(row.turn_id or "", []) if row else []
            elif row is not None and row.turn_id is None:
                kind = "notice"
                found = by_event_hash.get(row.delivery_id.split("#")[0].rsplit("-", 1)[-1])
                answered = [found] if found else []
            else:
                answered = []
            if not answered:
                ledger.unexpected.append({"chat": posted["chat_id"], "text": posted["text"][:80]})
                continue
            ledger.record(kind, answered, float(posted.get("at") or 0.0), row, late=late)
        return ledger

    def record(self, kind: str, answered: list[Message], at: float, row: Any, late: bool = False) -> None:
        turn = row.turn_id if row is not None else None
        self.posted.append(kind)
        if kind != "notice":
            self.covered.append(len(answered))
        for message in sorted(answered, key=lambda m: m.n):
            if kind != "notice" and not self.answered(message.key):
                self.per_chat[message.chat_id].append(message.n)
                self.first_reply_at[message.key] = at
            self.replies[message.key].append(kind)
            self.posts[message.key].append((kind, at, row, late))
            if turn:
                self.by_turn[message.key].add((kind, turn))

    def answered(self, key: str) -> bool:
        return any(kind != "notice" for kind in self.replies.get(key, []))

    def latency(self) -> dict[str, Any]:
        """Seconds from the webhook's acknowledgement to the first answer (or apology) the chat got."""
        waits = sorted((at - self.messages[key].accepted_at, key) for key, at in self.first_reply_at.items() if at)
        if not waits:
            return {}

        def pick(q: float) -> float:
            return round(waits[min(len(waits) - 1, int(q * len(waits)))][0], 1)

        return {"p50": pick(0.5), "p95": pick(0.95), "max": round(waits[-1][0], 1), "slowest": waits[-1][1]}

    def counts(self) -> Counter[tuple[str, str]]:
        return Counter((key, kind) for key, kinds in self.replies.items() for kind in kinds)

    def answered_and_apologized(self) -> list[str]:
        """Messages one turn both answered and apologized for. (A turn that failed leaves its message
        unanswered in the transcript, so the next turn may answer it along with its own: not this.)"""
        return sorted(
            key
            for key, replies in self.by_turn.items()
            if any(("answer", turn) in replies for kind, turn in replies if kind == "apology")
        )

    def late(self) -> list[str]:
        """Messages whose first answer reached the chat after the answer to a later message."""
        found = []
        for chat, numbers in self.per_chat.items():
            highest = 0
            for n in numbers:
                if n < highest:
                    found.append(next(k for k, m in self.messages.items() if m.chat_id == chat and m.n == n))
                highest = max(highest, n)
        return found

    def evidence(self, keys: list[Any]) -> list[dict[str, Any]]:
        """Each message with the replies it got and its turn's outbox rows (status, sends, last error)."""
        found = []
        for key in keys:
            key = key[0] if isinstance(key, tuple) else key
            rows = [
                {
                    "chunk": r.delivery_id.split("#")[0][-8:],
                    "status": r.status,
                    "attempts": r.attempts,
                    "error": r.error,
                }
                for r in self.rows_of.get(key, [])
            ]
            found.append(
                {
                    "message": key,
                    "update_id": self.messages[key].update_id if key in self.messages else None,
                    "replies": self.replies.get(key, []),
                    "outbox": rows,
                    **self.timeline(key),
                    "turns": sorted(self.turns_of.get(key, [])),
                    "sent_by": [self.sender(key, at, row, late) for _, at, row, late in self.posts.get(key, [])],
                }
            )
        return found

    def sender(self, key: str, at: float, row: Any, late: bool) -> dict[str, Any]:
        """One reply: seconds after the message's acknowledgement, the turn and chunk of the outbox
        row that recorded it (none when no row holds the platform's message id), and whether the
        platform posted it for a send that timed out at the sender (a late answer)."""
        message = self.messages.get(key)
        after = round(at - message.accepted_at, 1) if message is not None and message.accepted_at and at else None
        found = {"turn": (row.turn_id or "")[-8:] or None, "chunk": row.delivery_id[-12:]} if row is not None else {}
        return {"seconds": after, "turn": None, "chunk": None, **found, "late_answer": late}

    def late_duplicates(self) -> int:
        """Extra replies explained by a late platform answer: per message and kind of reply, at most
        one per post the platform made for a send that timed out at the sender (that send counted
        as failed, and was retried)."""
        late: Counter[tuple[str, str]] = Counter(
            (key, kind) for key, posts in self.posts.items() for kind, _, _, was_late in posts if was_late
        )
        return sum(min(n - 1, late[pair]) for pair, n in self.counts().items() if n > 1)

    def timeline(self, key: str) -> dict[str, Any]:
        """Seconds after the webhook's acknowledgement: the turn's start and end, the first reply."""
        message = self.messages.get(key)
        if message is None or not message.accepted_at:
            return {}
        started, stopped = self.turn_times.get(self.turn_of.get(key, ""), (0.0, 0.0))
        moments = {"turn_started": started, "turn_stopped": stopped, "replied": self.first_reply_at.get(key, 0.0)}
        return {"seconds": {name: round(at - message.accepted_at, 1) for name, at in moments.items() if at}}


def traffic_session(chat_id: int) -> int:
    return chat_id - 9_000_000


def _violations(numbers: list[int]) -> int:
    """Answers that reached the chat after the answer to a later message."""
    highest, count = 0, 0
    for n in numbers:
        if n < highest:
            count += 1
        highest = max(highest, n)
    return count


def _leases_held(sfn: Any) -> list[dict[str, Any]]:
    """Routes whose lease is still held after the run (what the tick's lease recovery would take
    over once it expires), with how the holding turn's executions went: the states they failed in."""
    import boto3

    table = os.environ["HERMES_ROUTES_TABLE"]
    machine = os.environ["HERMES_TURN_STATE_MACHINE_ARN"]
    held = []
    for page in boto3.client("dynamodb").get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            turn = item.get("lease_turn_id", {}).get("S")
            if not turn:
                continue
            runs = []
            executions = sfn.get_paginator("list_executions").paginate(stateMachineArn=machine)
            for execution in (e for page in executions for e in page["executions"]):
                if not execution["name"].startswith(turn):
                    continue
                events = sfn.get_execution_history(executionArn=execution["executionArn"], maxResults=1000)["events"]
                failed = [
                    (e["type"], json.dumps(e.get("taskFailedEventDetails") or e.get("lambdaFunctionFailedEventDetails")
                                           or e.get("executionFailedEventDetails") or {})[:160])
                    for e in events if "Failed" in e["type"] or "TimedOut" in e["type"]
                ]  # fmt: skip
                runs.append({"name": execution["name"], "status": execution["status"], "failures": failed[-6:]})
            held.append({"turn": turn, "queued": len(item.get("turn_queue", {}).get("L", [])), "executions": runs})
    return held


def _failure(sfn: Any, arn: str) -> str:
    for event in sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]:
        details = event.get("stateEnteredEventDetails") or {}
        if details.get("name") == "Fail":
            error = json.loads(details.get("input") or "{}").get("error") or {}
            cause = str(error.get("Cause") or "")
            try:
                cause = str(json.loads(cause).get("errorMessage", ""))[:60]
            except ValueError:
                cause = cause[:60]
            return f"{error.get('Error')}: {cause}"
    return "unknown"


def _wrong_bot(sent: list[dict[str, Any]], messages: list[Message]) -> list[dict[str, Any]]:
    """Replies that reached a session's chat through a bot other than the one the session talks to."""
    bot_of_chat = {str(m.chat_id): m.bot for m in messages}
    return [
        {"chat": f"s{traffic_session(int(s['chat_id']))}", "bot": s["bot"], "expected": expected}
        for s in sent
        if (expected := bot_of_chat.get(str(s["chat_id"]))) is not None and s["bot"] != expected
    ]


def _dead_letters(by_ref: dict[tuple[str, int], Message]) -> dict[str, Any]:
    """The shared dead-letter queue's entries, each with its kind, reason and the message it is
    about (a stream batch's messages read back through the stream)."""
    from hermes_gateway import wiring
    from hermes_gateway.services.dead_letters import peek

    entries: list[dict[str, Any]] = []
    messages: set[str] = set()
    for letter in peek(wiring.dead_letters(), 10_000):
        for event_id in _event_ids(letter):
            message = by_ref.get(_ref(event_id) or ("", -1))
            entries.append(
                {"kind": letter.kind, "message": message.key if message else None, "reason": letter.reason[:200]}
            )
            if message is not None:
                messages.add(message.key)
    return {"count": len(entries), "entries": entries, "messages": messages}


def _event_ids(letter: Any) -> list[str | None]:
    """The platform event ids a dead letter is about (None when it names none)."""
    from hermes_gateway import wiring

    if letter.jobs:
        return [job.get("correlation_id") for job in letter.jobs]
    if letter.kind == "inbound":
        return [(letter.body.get("message") or {}).get("event_id") or (letter.body.get("key") or [None, None])[1]]
    if letter.kind == "inbound-batch":
        info = letter.body["DDBStreamBatchInfo"]
        keys = wiring.inbox().batch_keys(
            info["streamArn"], info["shardId"], info["startSequenceNumber"], info["endSequenceNumber"]
        )
        return [event_id for _, event_id in keys or []] or [None]
    return [None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=None)
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "faults-latest.json")
    parser.add_argument("--logs", type=Path, default=None, help="write the functions' log lines here")
    args = parser.parse_args()
    profile = SIZES[args.size]
    if args.sessions:
        profile = replace(profile, sessions=args.sessions)
    if args.messages:
        profile = replace(profile, messages=args.messages)
    report = {"size": args.size, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    report.update(run(profile, args.seed, args.logs))
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({key: report[key] for key in SUMMARY}, indent=2))
    print(f"full report: {args.out}")


SUMMARY = (
    "received", "received_by_bot", "turns", "replies", "replies_by_bot", "duplicate_replies",
    "duplicate_replies_unexplained", "lost", "order_violations", "wrong_bot", "dead_lettered", "dlq_reasons",
    "turn_outcomes", "quiescent", "seconds",
)  # fmt: skip


if __name__ == "__main__":
    main()
