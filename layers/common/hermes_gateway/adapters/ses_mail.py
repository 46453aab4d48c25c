"""Sending e-mail with Amazon SES v2 `SendEmail` (raw content), as `platforms.email.Mailer`.

The function's role may send only from the configured address (infra/capabilities/email.py). SES's
answers become the delivery's errors: throttling is a rate limit, its 5xx and a connection that
failed are transient, a refusal (an unverified identity, a suspended account, a rejected message)
is permanent. A recipient SES will not reach bounces later: the bounce event marks the chunk failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from hermes_gateway.adapters.aws import client_error
from hermes_gateway.errors import PermanentError, RateLimited, TransientError

_RATE_LIMITED = ("TooManyRequestsException", "Throttling", "ThrottlingException")
# A daily sending quota spent: the delivery's own retries come later, and its dead letters after.
_QUOTA = ("LimitExceededException",)
_QUOTA_RETRY_SECONDS = 60.0


class SesMailer:
    def __init__(self, *, region: str | None = None, endpoint_url: str | None = None) -> None:
        self._region = region
        self._endpoint_url = endpoint_url or None

    def __repr__(self) -> str:
        return f"SesMailer({self._endpoint_url or 'ses'!r})"

    @cached_property
    def _client(self) -> Any:
        import boto3
        from botocore.config import Config

        # botocore tries throttled and failed calls once more itself; the delivery retries after that.
        config = Config(connect_timeout=5, read_timeout=15, retries={"total_max_attempts": 2, "mode": "standard"})
        return boto3.client("sesv2", region_name=self._region, endpoint_url=self._endpoint_url, config=config)

    def send(self, *, sender: str, to: str, raw: bytes, tags: Mapping[str, str], configuration_set: str | None) -> str:
        """Send one raw MIME message; SES's message id."""
        from botocore.exceptions import BotoCoreError, ClientError

        request: dict[str, Any] = {
            "FromEmailAddress": sender,
            "Destination": {"ToAddresses": [to]},
            "Content": {"Raw": {"Data": raw}},
        }
        if tags:
            request["EmailTags"] = [{"Name": name, "Value": value} for name, value in tags.items()]
        if configuration_set:
            request["ConfigurationSetName"] = configuration_set
        try:
            answer = self._client.send_email(**request)
        except ClientError as exc:
            raise _error(exc) from None
        except BotoCoreError as exc:  # no connection, a timeout: SES may or may not have it
            raise TransientError(f"ses: {type(exc).__name__}") from None
        message_id = answer.get("MessageId")
        return str(message_id) if message_id else ""


def _error(exc: Any) -> Exception:
    code, status, message = client_error(exc)
    # SES's message says what is wrong (an unverified identity, a bad address); it holds no secret.
    detail = f"ses: {code}: {message[:200]}"
    if code in _RATE_LIMITED or status == 429:
        return RateLimited(1.0, detail)
    if code in _QUOTA:
        return RateLimited(_QUOTA_RETRY_SECONDS, detail)
    if status >= 500:
        return TransientError(detail)
    return PermanentError(detail)
