"""Telegram as an ingress adapter: the secret header check, then `parse_update`."""

from __future__ import annotations

from hermes_gateway.platforms import telegram
from hermes_gateway.platforms.base import AdapterContext
from hermes_gateway.services.ingress import Accepted, HttpRequest, HttpResponse, Ignored, Parsed, json_payload


class TelegramInbound:
    def __init__(self, context: AdapterContext) -> None:
        self._context = context

    def verify(self, request: HttpRequest) -> None:
        telegram.verify_secret_header(request.headers, self._context.secret("TELEGRAM_WEBHOOK_SECRET"))

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        update = json_payload(request)
        parsed = telegram.parse_update(update, received_at=received_at)
        item = Ignored(parsed.reason) if isinstance(parsed, telegram.Ignored) else parsed
        press = update.get("callback_query") if isinstance(update, dict) else None
        if isinstance(press, dict) and isinstance(press.get("id"), str):
            # Answered in the webhook's own response (no token needed here): the button stops spinning.
            ack = HttpResponse(200, {"method": "answerCallbackQuery", "callback_query_id": press["id"]})
            return Accepted(items=(item,), ack=ack)
        return item
