"""One place owns the logger and metrics. Log lines carry structured keys, never message text or
raw platform ids: ids are hashed with `hash_id` before they reach a log line."""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricResolution, MetricUnit

# An invocation that counts nothing (a turn's tool round, an idle tick) is normal, not worth a warning.
warnings.filterwarnings("ignore", message="No application metrics to publish")

_SURROGATE = re.compile("[\ud800-\udfff]")


# What Powertools adds that the log group already says (each line is billed by its bytes: these
# and the keys below were about 40% of an ordinary line). The request id stays.
_SAID_BY_THE_LOG_GROUP = ("function_name", "function_arn", "function_memory_size", "service")
# Kept only where they say something: the source line of a warning or an error (an INFO line's
# message names its place), and a cold start (not every warm invocation's "false").
_WHERE = "location"
_COLD_START = "cold_start"
_PLAIN_LEVELS = ("INFO", "DEBUG")


def _said(record: dict[str, Any]) -> dict[str, Any]:
    plain = record.get("level") in _PLAIN_LEVELS
    return {
        k: v
        for k, v in record.items()
        if k not in _SAID_BY_THE_LOG_GROUP and not (k == _WHERE and plain) and not (k == _COLD_START and v is False)
    }


def log_json(record: Any) -> str:
    """A log line as Powertools writes it (compact, non-ASCII kept readable), without what the log
    group already says or what says nothing (`_said`), and a line holding a lone surrogate (a
    hostile value in a reason) written ASCII-escaped: written raw, no UTF-8 stream accepts it and
    the whole line is lost."""
    if isinstance(record, dict):
        record = _said(record)
    text = json.dumps(record, default=str, separators=(",", ":"), ensure_ascii=False)
    if _SURROGATE.search(text) is None:
        return text
    return json.dumps(record, default=str, separators=(",", ":"), ensure_ascii=True)


METRICS_DISABLED_ENV = "POWERTOOLS_METRICS_DISABLED"  # set where the deployment keeps no custom metrics


def metrics_disabled() -> bool:
    return os.environ.get(METRICS_DISABLED_ENV, "false").strip().lower() in ("1", "true", "yes", "on")


class GatewayMetrics(Metrics):
    """Powertools' metrics, where switching them off (`POWERTOOLS_METRICS_DISABLED`, as the minimal
    observability tier does) also stops them being collected: Powertools' own switch only skips the
    flush, so a warm function would keep every value and print them anyway once a metric holds 100."""

    def add_metric(
        self, name: str, unit: MetricUnit | str, value: float, resolution: MetricResolution | int = 60
    ) -> None:
        if metrics_disabled():
            return
        super().add_metric(name=name, unit=unit, value=value, resolution=resolution)


logger = Logger(service="hermes-gateway", json_serializer=log_json)
metrics = GatewayMetrics(namespace="HermesGateway", service="hermes-gateway")

__all__ = ["MetricUnit", "correlate", "hash_id", "logger", "metrics"]


def correlate(correlation_id: str | None, session: str | None) -> None:
    """The keys every following line of this invocation carries: the platform event id (or the
    delivery's) and the hashed session key. Kept per thread (a context variable), not process-wide:
    local mode runs every function as threads of one process, where process-wide keys mixed up the
    lines of invocations in flight together. Each handler's `inject_lambda_context(clear_state=True)`
    clears them when the next invocation begins; a thread a handler starts carries them if it runs
    in a copy of the context (`contextvars.copy_context`)."""
    logger.thread_safe_append_keys(correlation_id=correlation_id, session=session)


def hash_id(value: str | None) -> str | None:
    """A stable, non-reversible handle for an id or session key (12 hex characters)."""
    if value is None:
        return None
    # surrogatepass: a hostile id still gets its handle (and the log line its keys)
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
