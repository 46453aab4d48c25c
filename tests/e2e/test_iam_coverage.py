"""Every AWS call a function makes in local mode is one its deployed role allows.

Local mode runs the handlers with moto, which checks no permissions, so a call a function needs and
its role lacks would first fail in the cloud (AccessDenied after `cdk deploy`). Here local mode is
driven through the paths a deployment meets (answered messages, a busy chat, commands, pairing, the
Signal forwarder's calls on its mailbox, the session API, the every-minute tick); the bench meter
attributes each botocore call to the function invocation that made it; each call becomes the IAM
actions and resources AWS would authorize it as (a transaction: one action per item, on the item's
table; a query on an index: the index's ARN); and each must be allowed by a statement of that
function's role in the synthesized stack.

E-mail is driven too: a message with an attachment received as SES would deliver it (the
ingress reads the stored message, the agent reads the attachment's range and stores it), one
refused (its stored copy deleted), the answers sent through SES v2 from the configured address,
and a bounce marking an answer's outbox row failed.

What this does not reach: SSM (local mode's secrets are environment variables; the secret paths
are checked in tests/infra), a file's download (no bot token: the photo's PrepareMedia task
records that it could not be fetched), tool calls (the echo model calls no tool), cron turns and WhatsApp
reports (their tables are reached by the tick and other tests' functions, not here).
"""

from __future__ import annotations

import base64
import fnmatch
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.meter import Meter, resource_name
from hermes_gateway.platforms.standard_webhook import sign
from hermes_gateway.resources import FUNCTIONS, MEDIA
from hermes_gateway.settings import load_settings
from tests.e2e.conftest import Client, telegram_update

pytestmark = pytest.mark.e2e

# botocore's service names and the IAM action prefix, where they differ; operations whose IAM
# action has another name
IAM_PREFIX = {"stepfunctions": "states", "sesv2": "ses"}
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "email"
ADDRESS = "hermes@example.com"  # the synthesized stack's e-mail address (tests/infra/conftest.py)
IAM_ACTION = {("lambda", "Invoke"): "InvokeFunction"}
S3_BUCKET_ACTIONS = frozenset({"ListObjectsV2"})  # authorized on the bucket (s3:ListBucket); the others on objects
TRANSACT_ACTION = {
    "Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem",
}  # fmt: skip

Need = tuple[str, str, str]  # function, IAM action, the resource: a logical name, "<table>/index" for an index


def needs(function: str, service: str, operation: str, params: dict[str, Any]) -> list[Need]:
    """The (function, action, resource) triples AWS authorizes one call as."""
    prefix = IAM_PREFIX.get(service, service)
    if service == "s3":  # the media bucket itself (a listing), or an object of it, by its key
        if operation in S3_BUCKET_ACTIONS:
            return [(function, "s3:ListBucket", MEDIA.name)]
        if operation == "DeleteObjects":  # s3:DeleteObject on each key
            objects = (params.get("Delete") or {}).get("Objects") or ()
            return [(function, "s3:DeleteObject", f"{MEDIA.name}/{o['Key']}") for o in objects]
        return [(function, f"s3:{operation}", f"{MEDIA.name}/{params.get('Key', '')}")]
    if service == "sesv2":  # a mail sent from an address: its identity (and the From condition)
        return [(function, f"ses:{operation}", f"from/{params.get('FromEmailAddress', '')}")]
    if operation in ("TransactWriteItems", "TransactGetItems"):
        found = []
        for item in params.get("TransactItems") or ():
            ((kind, body),) = item.items()
            action = TRANSACT_ACTION.get(kind, "GetItem")
            found.append((function, f"dynamodb:{action}", resource_name(service, {"TableName": body["TableName"]})))
        return found
    if operation in ("BatchWriteItem", "BatchGetItem"):
        tables = params.get("RequestItems") or {}
        return [(function, f"dynamodb:{operation}", resource_name(service, {"TableName": t})) for t in tables]
    resource = resource_name(service, params)
    if service == "dynamodb" and params.get("IndexName"):
        resource += "/index"
    return [(function, f"{prefix}:{IAM_ACTION.get((service, operation), operation)}", resource)]


class PermissionMeter(Meter):
    """The bench meter, also keeping what each call needs (no request units: none are priced here)."""

    def __init__(self) -> None:
        super().__init__(units=False)
        self.needed: dict[Need, str] = {}  # -> one example call, for the failure message

    def _count(self, function: str, service: str, operation: str, resource: str, params: dict[str, Any],
               *args: Any) -> None:  # fmt: skip
        super()._count(function, service, operation, resource, params, *args)
        for need in needs(function, service, operation, params):
            self.needed.setdefault(need, f"{service}.{operation} {resource}")


@pytest.fixture
def metered() -> Iterator[PermissionMeter]:
    meter = PermissionMeter().install()
    yield meter
    meter.uninstall()


def drive(client: Client, meter: PermissionMeter, tmp_path: Path) -> None:
    """The paths a deployment meets in its first hour."""
    sent = 0

    def say(text: str, user: int = 42, **where: Any) -> None:
        nonlocal sent
        sent += 1
        assert client.telegram(telegram_update(1000 + sent, text, user_id=user, **where))[0] == 200

    say("hello")  # a new session, answered
    say("and a follow-up")  # an existing one
    say("one more right away")  # a busy session: queued behind the turn, handed on
    client.wait_outbox(3, timeout=30)
    say("/status")
    say("/new")  # the session replaced
    say("hello in a topic", chat_id=-100123, chat_type="supergroup", thread_id=7)
    say("hello?", user=43)  # a stranger in a DM: a pairing code
    sent += 1  # a photo: the attachments function's PrepareMedia task (no bot token here: not fetched)
    photo = telegram_update(1000 + sent, "")
    del photo["message"]["text"]
    photo["message"]["photo"] = [{"file_id": "p1", "file_unique_id": "u1", "width": 90, "height": 90, "file_size": 900}]
    assert client.telegram(photo)[0] == 200
    assert client.gateway.wait_idle(timeout=30)
    signal_forwarder(client)
    token = client.gateway.local_secrets["SESSION_API_TOKEN"]

    def api(body: dict[str, Any]) -> dict[str, Any]:
        status, answer = client.request(
            "POST", "/api/sessions", json.dumps(body).encode(),
            {"content-type": "application/json", "authorization": f"Bearer {token}"},
        )  # fmt: skip
        assert status == 200, (body, answer)
        return dict(answer)

    created = api({"verb": "session.create", "request_id": "iam-1", "chat": "iam"})["session"]
    api({"verb": "session.list"})
    api({"verb": "session.search", "query": "hello"})
    api({"verb": "session.resume", "session_id": created["id"]})
    api({"verb": "session.mutate", "request_id": "iam-2", "session_id": created["id"], "op": "rename",
         "title": "renamed", "revision": created["revision"]})  # fmt: skip
    client.gateway.run_schedule("expiry")  # the tick: leases, due jobs, expired sessions
    assert client.gateway.wait_idle(timeout=30)
    drive_email(client)
    # a user's data on request: /forget, its confirmation, and the tick that erases it (a file of
    # their DM session in the bucket, put there by no function, for the erasure to delete)
    say("/forget")
    say("/forget confirm")
    assert client.gateway.wait_idle(timeout=30)
    _put_file_of(client, "agent:main:telegram:dm:99")
    client.gateway.run_schedule("expiry")
    assert client.gateway.wait_idle(timeout=30)
    time.sleep(0.5)  # the last invocations' events flushed


def drive_email(client: Client) -> None:
    """A mail with a PNG answered (stored message read, attachment range read and stored, answer
    sent), a spam refused (its copy deleted), a bounce of the answer recorded."""
    from hermes_gateway.platforms.email import delivery_tag

    headers = {"x-hermes-local-token": client.gateway.local_secrets["WEBCHAT_TOKEN"]}
    for query in ("", "?spam=FAIL"):
        status, _ = client.request(
            "POST", "/local/email" + query, (FIXTURES / "04_attachment_png.eml").read_bytes(), headers
        )
        assert status == 202
    assert client.gateway.wait_idle(timeout=30)
    (answer,) = client.wait_outbox(1, platform="email")
    bounce = json.loads((FIXTURES / "ses_eventbridge_bounce_reconstructed.json").read_text())
    bounce["detail"]["mail"]["messageId"] = answer["platform_message_id"]
    bounce["detail"]["mail"]["tags"]["hermes-delivery"] = [delivery_tag(answer["delivery_id"])]
    assert client.gateway.functions.invoke("ingress", bounce)["outcome"] == "reported"


def _put_file_of(client: Client, session_key: str) -> None:
    import boto3

    from hermes_gateway import wiring

    route = wiring.session_stores().routes.get(session_key)
    assert route is not None
    bucket = wiring.bindings().buckets[MEDIA.name]
    boto3.client("s3", region_name=wiring.region()).put_object(
        Bucket=bucket, Key=f"default/{route.session_id}/9-0", Body=b"x"
    )


SIGNAL_SECRET = "whsec_" + base64.b64encode(b"iam-coverage-signal-relay-secret").decode()


def signal_forwarder(client: Client) -> None:
    """What the Signal forwarder does: a message, its files' upload URLs, the reply collected from
    the mailbox and reported sent (the ingress's queries and updates of the outbox)."""
    from tests.fakes.webhook_signers import signal_payload

    def call(path: str, body: bytes) -> dict[str, Any]:
        ts = str(int(time.time()))
        headers = {"content-type": "application/json", "webhook-id": f"msg_iam_{path}_{ts}", "webhook-timestamp": ts}
        headers["webhook-signature"] = sign(SIGNAL_SECRET, headers["webhook-id"], ts, body)
        status, answer = client.request("POST", "/webhooks/signal" + path, body, headers)
        assert status == 200, (path, answer)
        return dict(answer)

    call("", signal_payload(1, "+15555550123"))
    call("/uploads", json.dumps({"files": [{"id": "a.jpg", "size": 10, "content_type": "image/jpeg"}]}).encode())
    assert client.gateway.wait_idle(timeout=30)
    letters = call("/outbox", b"{}")["letters"]
    assert len(letters) == 1
    call("/outbox", json.dumps({"reports": [{"id": letters[0]["id"], "status": "sent", "timestamp": 1}]}).encode())


def allows(statement: dict[str, Any], action: str, resource: str, identifiers: dict[str, tuple[str, ...]]) -> bool:
    """Whether `statement` allows `action` on `resource`, named in it by one of its identifiers."""
    if statement.get("Effect") != "Allow":
        return False
    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
    if not any(fnmatch.fnmatchcase(action, pattern) for pattern in actions):
        return False
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    name, _, index = resource.partition("/")
    if name == "from":  # SES: the sender's identity (its address or domain), and the From condition
        wanted = {f"identity/{index}", f"identity/{index.rpartition('@')[2]}"}
        condition = (statement.get("Condition") or {}).get("StringEquals", {}).get("ses:FromAddress")
        named = any(w in json.dumps(granted) for granted in resources for w in wanted)
        return named and condition in (None, index)
    marks = identifiers.get(name, ())
    if name == MEDIA.name:
        return _allows_media(resources, index, marks)
    for granted in resources:
        if granted == "*":
            return True
        text = json.dumps(granted)
        if not any(mark in text for mark in marks):
            continue
        if index:  # the index's ARN is the table's with /index/<name>: granted as "<table ARN>/index/*"
            if "/index/*" in text:
                return True
        elif "/index/" not in text:
            return True
    return False


def _allows_media(resources: list[Any], key: str, marks: tuple[str, ...]) -> bool:
    """A grant on the media bucket itself (its ARN: a listing, `key` empty) or on its objects (the
    grant's key pattern, `<bucket ARN>/<pattern>`, must match `key`)."""
    named = [granted for granted in resources if any(mark in json.dumps(granted) for mark in marks)]
    if not key:
        return any(not _key_pattern(granted) for granted in named)
    return any(_key_pattern(granted) and fnmatch.fnmatchcase("/" + key, _key_pattern(granted)) for granted in named)


def _key_pattern(granted: Any) -> str:
    """The object part of a bucket grant: `/*` of `{"Fn::Join": ["", [<bucket ARN>, "/*"]]}`."""
    parts = granted.get("Fn::Join", ["", []])[1] if isinstance(granted, dict) else []
    return next((p for p in reversed(parts) if isinstance(p, str)), "")


FIXED_NAMES = ("TableName", "QueueName", "StateMachineName", "FunctionName", "Name")


def resource_identifiers(resources: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Logical name (`routes`, `dead-letters`, `turn`, `delivery`, `events`, `media`) -> how a policy names
    it: a reference to its logical id, or the fixed name an ARN is built from (the state machine's,
    which a reference would make a cycle)."""
    from hermes_gateway.resources import BUCKETS, EVENT_BUS, QUEUES, TABLES, TURN_STATE_MACHINE

    ids: dict[str, str] = {}
    for logical_id, resource in resources.items():
        kind = resource["Type"]
        if kind == "AWS::DynamoDB::Table":
            ids.update({t.name: logical_id for t in TABLES if logical_id.startswith(f"Data{t.name}")})
        elif kind == "AWS::SQS::Queue":
            prefix = {"Queues" + q.name.replace("-", ""): q.name for q in QUEUES}
            ids.update({name: logical_id for p, name in prefix.items() if logical_id.startswith(p)})
        elif kind == "AWS::StepFunctions::StateMachine":
            ids[TURN_STATE_MACHINE.name] = logical_id
        elif kind == "AWS::Events::EventBus":
            ids[EVENT_BUS.name] = logical_id
        elif kind == "AWS::S3::Bucket":
            ids.update({b.name: logical_id for b in BUCKETS if logical_id.lower().startswith(b.name)})
        elif kind == "AWS::Lambda::Function":
            ids[resource["Properties"]["Environment"]["Variables"]["HERMES_FUNCTION"]] = logical_id
        elif kind == "AWS::S3::Bucket" and logical_id.startswith("Mediamedia"):
            ids["media"] = logical_id
    found = {}
    for name, logical_id in ids.items():
        properties = resources[logical_id].get("Properties", {})
        fixed = [properties[p] for p in FIXED_NAMES if isinstance(properties.get(p), str)]
        found[name] = (f'"{logical_id}"', *(f':{n}"' for n in fixed), *(f'/{n}"' for n in fixed))
    return found


def test_every_call_a_function_makes_is_allowed_by_its_deployed_role(
    start_gateway: Callable[..., Client], metered: PermissionMeter, tmp_path: Path
) -> None:
    # Given local mode with an allowlist and DM pairing, driven through a deployment's paths
    client = start_gateway(
        TELEGRAM_ALLOWED_USERS="42",
        TELEGRAM_UNAUTHORIZED_DM="pair",
        HERMES_LOCAL_STATE=str(tmp_path / "state.json"),
        EMAIL_ENABLED="true",
        EMAIL_ADDRESS=ADDRESS,
        EMAIL_ALLOWED_USERS="*@example.com",
        SIGNAL_RELAY_SECRET=SIGNAL_SECRET,
        SIGNAL_ALLOWED_USERS="+15555550123",
    )
    drive(client, metered, tmp_path)
    called = {function for function, _, _ in metered.needed}
    assert called >= {spec.name for spec in FUNCTIONS}, "a function the run never invoked"

    # When the stack those functions deploy in is synthesized
    from tests.infra.conftest import EVERY_PLATFORM, synthesize
    from tests.infra.test_infra_stack import functions_by_name, ref, role_statements

    synthesized = synthesize(load_settings(env={}, config=EVERY_PLATFORM), tmp_path / "cdk.out")
    ids = resource_identifiers(synthesized.resources)
    deployed = functions_by_name(synthesized)

    # Then each call is allowed by a statement of the calling function's role
    refused = []
    for (function, action, resource), example in sorted(metered.needed.items()):
        statements = role_statements(synthesized, ref(deployed[function][1]["Role"]))
        if not any(allows(s, action, resource, ids) for s in statements):
            refused.append(f"{function}: {action} on {resource} (e.g. {example})")
    assert refused == [], "\n".join(refused)
    assert len(metered.needed) > 30  # the run made the calls it was meant to
    report = os.environ.get(REPORT_ENV)
    if report:  # for a closing note or a review: what each function used of what it is granted
        Path(report).write_text(coverage_report(metered.needed, synthesized, deployed, ids), encoding="utf-8")


REPORT_ENV = "HERMES_IAM_REPORT"  # a path: the run writes each function's exercised and unexercised grants there


def coverage_report(
    needed: dict[Need, str], synthesized: Any, deployed: dict[str, Any], ids: dict[str, tuple[str, ...]]
) -> str:
    """Per function: the actions its calls needed here, and each granted (action, resource) no call used."""
    from tests.infra.test_infra_stack import ref, role_statements

    named = {mark: name for name, marks in ids.items() for mark in marks}
    lines = ["# IAM coverage of local mode's run (tests/e2e/test_iam_coverage.py)", ""]
    for function in sorted(deployed):
        used = sorted({(action, resource) for (f, action, resource) in needed if f == function})
        lines.append(f"## {function}")
        lines.append("exercised: " + (", ".join(f"{a} {r}" for a, r in used) or "none"))
        idle = []
        for statement in role_statements(synthesized, ref(deployed[function][1]["Role"])):
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            where = sorted({_resource_label(r, named) for r in resources})
            for action in actions:
                if not any(fnmatch.fnmatchcase(a, action) for a, _ in used):
                    idle.append(f"{action} on {', '.join(where)}")
        lines.append("granted, not exercised here: " + ("; ".join(sorted(set(idle))) or "none"))
        lines.append("")
    return "\n".join(lines)


def _resource_label(resource: Any, named: dict[str, str]) -> str:
    text = json.dumps(resource)
    found = sorted({name for mark, name in named.items() if mark in text})
    suffix = "/index/*" if "/index/" in text else ""
    if found:
        return "+".join(found) + suffix
    for mark, label in (("Logs", "its log group"), ("Media", "media bucket objects"), (":ssm:", "SSM parameters")):
        if mark in text:
            return label
    return "*" if resource == "*" else text.replace('"', "")[:80]


def test_the_check_refuses_a_call_the_role_lacks() -> None:
    # The matcher itself: a grant on another table, or on a table but not its index, is no grant
    ids = {"routes": ('"DataroutesAAAA"',), "sessions": ('"DatasessionsBBBB"',)}
    table = {"Fn::GetAtt": ["DataroutesAAAA", "Arn"]}
    index = {"Fn::Join": ["", [table, "/index/*"]]}
    statement = {"Effect": "Allow", "Action": ["dynamodb:GetItem", "dynamodb:Query"], "Resource": [table]}
    assert allows(statement, "dynamodb:GetItem", "routes", ids)
    assert not allows(statement, "dynamodb:PutItem", "routes", ids)
    assert not allows(statement, "dynamodb:GetItem", "sessions", ids)
    assert not allows(statement, "dynamodb:Query", "routes/index", ids)
    assert allows({**statement, "Resource": [table, index]}, "dynamodb:Query", "routes/index", ids)
    assert allows({**statement, "Action": "dynamodb:*"}, "dynamodb:DeleteItem", "routes", ids)
    transaction = {
        "TransactItems": [{"Put": {"TableName": "hermes-local-routes"}}, {"Update": {"TableName": "x-sessions"}}]
    }
    assert needs("router", "dynamodb", "TransactWriteItems", transaction) == [
        ("router", "dynamodb:PutItem", "routes"),
        ("router", "dynamodb:UpdateItem", "sessions"),
    ]
    assert needs("agent", "lambda", "Invoke", {"FunctionName": "hermes-local-delivery"}) == [
        ("agent", "lambda:InvokeFunction", "delivery")
    ]
    # A bucket's objects and the bucket itself are granted apart: listing needs the bucket's ARN
    bucket = {"Fn::GetAtt": ["MediamediaCCCC", "Arn"]}
    objects = {"Fn::Join": ["", [bucket, "/*"]]}
    marks = {"media": ('"MediamediaCCCC"',)}
    on_objects = {"Effect": "Allow", "Action": ["s3:DeleteObject", "s3:ListBucket"], "Resource": [objects]}
    assert allows(on_objects, "s3:DeleteObject", "media/default/s1/1-0", marks)
    assert not allows(on_objects, "s3:ListBucket", "media", marks)
    on_bucket = {"Effect": "Allow", "Action": ["s3:DeleteObject", "s3:ListBucket"], "Resource": [bucket]}
    assert allows(on_bucket, "s3:ListBucket", "media", marks)
    assert not allows(on_bucket, "s3:DeleteObject", "media/default/s1/1-0", marks)
    deleting = {"Bucket": "hermes-local-media", "Delete": {"Objects": [{"Key": "default/s1/1-0"}, {"Key": "d/s/2"}]}}
    assert needs("expiry", "s3", "DeleteObjects", deleting) == [
        ("expiry", "s3:DeleteObject", "media/default/s1/1-0"), ("expiry", "s3:DeleteObject", "media/d/s/2"),
    ]  # fmt: skip
    assert needs("expiry", "s3", "ListObjectsV2", {"Bucket": "hermes-local-media"}) == [
        ("expiry", "s3:ListBucket", "media")
    ]
