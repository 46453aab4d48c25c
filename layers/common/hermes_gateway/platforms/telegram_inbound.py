"""Telegram as an ingress adapter: the secret header check, then `parse_update`."""

from __future__ import annotations

from hermes_gateway.platforms import telegram
from hermes_gateway.platforms.base import AdapterContext
from hermes_gateway.services.ingress import HttpRequest, Ignored, Parsed, json_payload


class TelegramInbound:
    def __init__(self, context: AdapterContext) -> None:
        self._context = context

    def verify(self, request: HttpRequest) -> None:
        telegram.verify_secret_header(request.headers, self._context.secret("TELEGRAM_WEBHOOK_SECRET"))

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        parsed = telegram.parse_update(json_payload(request), received_at=received_at)
        return Ignored(parsed.reason) if isinstance(parsed, telegram.Ignored) else parsed
