"""Twilio SMS: the number's "A message comes in" webhook
(`hermes-gateway webhooks register|status sms`)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from hermes_gateway.errors import PermanentError
from hermes_gateway.platforms.base import AdapterContext
from hermes_gateway.platforms.twilio import _Account, _account


def _incoming_number(context: AdapterContext) -> tuple[_Account, dict[str, Any]]:
    """The account and the IncomingPhoneNumber resource of the configured `from_number`."""
    account = _account(context)
    if account is None:
        raise PermanentError("twilio is not configured: set TWILIO_AUTH_TOKEN and TWILIO_ACCOUNT_SID")
    number = str(context.option("from_number") or "")
    if not number:
        raise PermanentError("twilio is not configured: set TWILIO_FROM_NUMBER (the E.164 number to use)")
    answer = account.call("GET", "/IncomingPhoneNumbers.json?" + urllib.parse.urlencode({"PhoneNumber": number}))
    if answer.status != 200:
        raise account.failure(answer)
    found = answer.json_object().get("incoming_phone_numbers")
    matches = [n for n in found or [] if isinstance(n, dict) and n.get("phone_number") == number]
    if not matches or not isinstance(matches[0].get("sid"), str) or not matches[0]["sid"].isalnum():
        raise PermanentError(f"twilio: the account has no phone number {number}")
    return account, matches[0]


def register_webhook(context: AdapterContext, url: str) -> str:
    """Point the number's "A message comes in" webhook (SmsUrl, POST) at `url`."""
    if not url.startswith(("https://", "http://")):
        raise PermanentError("twilio: the webhook URL must be an http(s) URL")
    account, number = _incoming_number(context)
    answer = account.call("POST", f"/IncomingPhoneNumbers/{number['sid']}.json", {"SmsUrl": url, "SmsMethod": "POST"})
    if answer.status != 200:
        raise account.failure(answer)
    return f"Twilio number {number.get('phone_number')} now sends incoming SMS to {url} (POST)"


def webhook_status(context: AdapterContext) -> dict[str, Any]:
    """What Twilio has registered for the configured number."""
    _, number = _incoming_number(context)
    return {key: number.get(key) for key in ("phone_number", "sid", "sms_url", "sms_method")}
