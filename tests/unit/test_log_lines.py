"""The functions' log lines: what each one carries (every byte is billed at ingestion)."""

from __future__ import annotations

import io
import json
import logging
from types import SimpleNamespace

from hermes_gateway.observability import logger


def test_a_line_keeps_the_request_id_and_drops_what_the_log_group_says() -> None:
    # Given the gateway's logger inside a Lambda invocation (Powertools adds the context's keys)
    context = SimpleNamespace(
        function_name="hermes-dev-router", memory_limit_in_mb=512, aws_request_id="req-1",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:hermes-dev-router",
    )  # fmt: skip
    raw = io.StringIO()
    handler = logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(raw)

    @logger.inject_lambda_context
    def handle(event: dict[str, str], context: object) -> None:
        logger.info("turn started", extra={"session": "abc123"})

    try:
        handle({}, context)
    finally:
        handler.setStream(previous)
        context_keys = ["function_name", "function_memory_size", "function_arn", "function_request_id", "cold_start"]
        logger.remove_keys(context_keys)
    line = json.loads(raw.getvalue().strip().splitlines()[-1])
    # Then the line says what happened and to which invocation, not which function (its log group does)
    assert line["message"] == "turn started" and line["session"] == "abc123"
    assert line["function_request_id"] == "req-1"
    assert not {"function_name", "function_arn", "function_memory_size"} & set(line)
