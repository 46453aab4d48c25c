"""Telegram as an ingress adapter: the secret header check, then `parse_update`."""

from __future__ import annotations

from typing import Any

from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.platforms import telegram
from hermes_gateway.secrets import Secrets
from hermes_gateway.services.ingress import HttpRequest, Ignored


class TelegramInbound:
    name = "telegram"

    def verify(self, request: HttpRequest, secrets: Secrets) -> None:
        telegram.verify_secret_header(request.headers, secrets.get("TELEGRAM_WEBHOOK_SECRET"))

    def parse(self, payload: Any, received_at: float) -> InboundMessage | Ignored:
        parsed = telegram.parse_update(payload, received_at=received_at)
        return Ignored(parsed.reason) if isinstance(parsed, telegram.Ignored) else parsed
