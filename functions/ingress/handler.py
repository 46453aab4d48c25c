"""Ingress: API Gateway (HTTP API, payload 2.0) → verify → normalize → one inbox write → acknowledge;
and e-mail: SES's receipts (read the stored message → normalize → one inbox write) and the sent
mails' bounces and complaints (EventBridge → the outbox row marked failed)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.adapters.api_gateway import HttpApiEvent
from hermes_gateway.errors import BadRequest, PayloadTooLarge
from hermes_gateway.observability import logger, metrics
from hermes_gateway.services.ingress import HttpRequest, HttpResponse, decode_body, handle_webhook, webhook_route


def platform_of(path_parameters: Mapping[str, str], raw_path: str) -> str:
    """`[/p/<profile>]/webhooks/{platform}[/{proxy+}]`: the segment after `webhooks`."""
    if path_parameters.get("platform"):
        return path_parameters["platform"]
    return webhook_route(raw_path)[1]


def _respond(response: HttpResponse) -> dict[str, Any]:
    return {"statusCode": response.status, "headers": response.headers, "body": response.encoded_body()}


def _mail(event: dict[str, Any], context: LambdaContext, received_at: float) -> dict[str, Any]:
    """SES's receipt of an e-mail, or a sent mail's bounce: imported only for them (a webhook's
    cold start never loads the e-mail code)."""
    from hermes_gateway.services import mail_ingress

    if mail_ingress.is_receipt(event):
        return mail_ingress.MailIngress(
            settings=wiring.settings(),
            mail=wiring.mail_adapter(),
            store=wiring.raw_mail_store(),
            enqueue_once=wiring.inbox().put_once,
            function_arn=context.invoked_function_arn,
        ).receive(event, received_at)
    return {"ok": True, "outcome": mail_ingress.record_feedback(event, report=wiring.report_delivery)}


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    received_at = time.time()
    if "Records" in event or event.get("source") == "aws.ses":
        return _mail(event, context, received_at)
    http = HttpApiEvent.of(event)
    platform = platform_of(http.path_parameters, http.raw_path)
    settings = wiring.settings()
    try:
        body = decode_body(http.body, http.is_base64_encoded, settings.max_body_bytes)
    except PayloadTooLarge as exc:
        logger.warning("webhook rejected", extra={"platform": platform, "status": 413, "reason": str(exc)})
        return _respond(HttpResponse(413, {"ok": False, "error": str(exc)}))
    except BadRequest as exc:
        logger.warning("webhook rejected", extra={"platform": platform, "status": 400, "reason": str(exc)})
        return _respond(HttpResponse(400, {"ok": False, "error": str(exc)}))
    request = HttpRequest(
        method=http.method,
        path=http.raw_path,
        headers=http.headers,
        body=body,
        query=http.query,
        raw_query=http.raw_query,
    )
    response = handle_webhook(
        platform,
        request,
        settings=settings,
        adapters=wiring.inbound_adapter,
        enqueue_once=wiring.inbox().put_once,
        received_at=received_at,
        profile=webhook_route(http.raw_path)[0],
        report_delivery=wiring.report_delivery,
        serve_mailbox=wiring.serve_mailbox,
    )
    return _respond(response)
