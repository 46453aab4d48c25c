"""Local mode's Amazon SES: what a receipt rule does with a received e-mail, and the sending side.

A raw RFC 822 message (`POST /local/email` on the local front, or `hermes-gateway email receive
--local <file.eml>`) is stored in the embedded S3 under the mail prefix and the ingress function
is invoked asynchronously with the event SES's Lambda action sends (`Records[].ses.{mail,
receipt}`: its headers, the recipients, the verdicts, the action naming the function), as the
deployed rule's S3 action and Lambda action do. The verdicts pass unless the caller says
otherwise (`spf=FAIL`, `virus=FAIL`, ...), to try the refusals.

Sending goes to the embedded SES v2 (moto), whose domain identity and configuration set local mode
creates at start; what was sent is read back for the outbox page (`sent_mail`).
"""

from __future__ import annotations

import email
import email.policy
import json
import secrets
import time
from collections.abc import Mapping
from email.utils import getaddresses
from typing import Any

from hermes_gateway.platforms.email_inbound import VERDICTS
from hermes_gateway.resources import MAIL

VERDICT_VALUES = ("PASS", "FAIL", "GRAY", "PROCESSING_FAILED")
_COMMON = {"From": "from", "To": "to", "Cc": "cc", "Reply-To": "replyTo", "Sender": "sender"}


def new_message_id() -> str:
    """An id shaped like SES's (lower-case letters and digits): the stored object's name."""
    return secrets.token_hex(16)


def receipt_event(
    raw: bytes,
    *,
    ses_id: str,
    recipients: list[str],
    function_arn: str,
    verdicts: Mapping[str, str] | None = None,
    envelope_from: str | None = None,
) -> dict[str, Any]:
    """The event SES's Lambda action sends for a message its S3 action stored as `ses_id`."""
    message = email.message_from_bytes(raw, policy=email.policy.compat32)
    headers = [{"name": str(name), "value": " ".join(str(value).split())} for name, value in message.items()]
    common: dict[str, Any] = {
        key: [str(v) for v in message.get_all(name) or ()] for name, key in _COMMON.items() if message.get(name)
    }
    common.update({"messageId": str(message.get("Message-ID", "")), "subject": str(message.get("Subject", ""))})
    sender = [addr for _, addr in getaddresses([str(v) for v in message.get_all("From") or ()]) if addr]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    given = {name: (verdicts or {}).get(name, "PASS") for name in VERDICTS}
    return {
        "Records": [
            {
                "eventSource": "aws:ses",
                "eventVersion": "1.0",
                "ses": {
                    "mail": {
                        "timestamp": stamp,
                        "source": envelope_from if envelope_from is not None else (sender[0] if sender else ""),
                        "messageId": ses_id,
                        "destination": recipients,
                        "headersTruncated": False,
                        "headers": headers,
                        "commonHeaders": common,
                    },
                    "receipt": {
                        "timestamp": stamp,
                        "processingTimeMillis": 1,
                        "recipients": recipients,
                        **{f"{name}Verdict": {"status": status} for name, status in given.items()},
                        "action": {"type": "Lambda", "functionArn": function_arn, "invocationType": "Event"},
                    },
                },
            }
        ]
    }


def receive(
    raw: bytes,
    *,
    bucket: str,
    function_arn: str,
    address: str,
    verdicts: Mapping[str, str] | None = None,
    region: str | None = None,
) -> str:
    """Store the message as SES's S3 action would and invoke the ingress as its Lambda action
    would (asynchronously: Lambda's retries and dead letters apply); the message's SES id."""
    import boto3

    ses_id = new_message_id()
    boto3.client("s3", region_name=region).put_object(Bucket=bucket, Key=MAIL.prefix + ses_id, Body=raw)
    event = receipt_event(raw, ses_id=ses_id, recipients=[address], function_arn=function_arn, verdicts=verdicts)
    boto3.client("lambda", region_name=region).invoke(
        FunctionName=function_arn, InvocationType="Event", Payload=json.dumps(event).encode()
    )
    return ses_id


def parse_verdicts(given: list[str]) -> dict[str, str]:
    """`spf=FAIL`-style overrides of the verdicts; ValueError for anything else."""
    found = {}
    for item in given:
        name, _, status = item.partition("=")
        if name.strip().lower() not in VERDICTS or status.strip().upper() not in VERDICT_VALUES:
            raise ValueError(f"{item!r}: use <{'|'.join(VERDICTS)}>=<{'|'.join(VERDICT_VALUES)}>, e.g. spf=FAIL")
        found[name.strip().lower()] = status.strip().upper()
    return found


def prepare_sending(domain: str, stage: str, region: str | None = None) -> None:
    """The embedded SES as the operator's account would be: the domain verified, the stack's
    configuration set there."""
    import boto3

    client = boto3.client("sesv2", region_name=region)
    client.create_email_identity(EmailIdentity=domain)
    client.create_configuration_set(ConfigurationSetName=MAIL.name(stage))


def sent_mail(message_ids: set[str]) -> dict[str, dict[str, str]]:
    """The headers of the mails the embedded SES sent, by message id (the outbox's platform message
    id): what a mail client would thread and show."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ses.models import ses_backends

    found: dict[str, dict[str, str]] = {}
    for backend in ses_backends[DEFAULT_ACCOUNT_ID].values():
        for sent in list(backend.sent_messages):
            if sent.id not in message_ids or not hasattr(sent, "raw_data"):
                continue
            parsed = email.message_from_string(sent.raw_data, policy=email.policy.default)
            found[sent.id] = {
                name: str(parsed.get(name))
                for name in ("From", "To", "Subject", "In-Reply-To", "References", "Auto-Submitted")
                if parsed.get(name) is not None
            }
    return found
