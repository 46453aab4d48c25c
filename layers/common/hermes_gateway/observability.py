"""One place owns the logger and metrics. Log lines carry structured keys, never message text or
raw platform ids: ids are hashed with `hash_id` before they reach a log line."""

from __future__ import annotations

import hashlib
import warnings

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

# A task that counts nothing (a turn's Prepare step) is normal, not worth a warning per invocation.
warnings.filterwarnings("ignore", message="No application metrics to publish")

logger = Logger(service="hermes-gateway")
metrics = Metrics(namespace="HermesGateway", service="hermes-gateway")

__all__ = ["MetricUnit", "hash_id", "logger", "metrics"]


def hash_id(value: str | None) -> str | None:
    """A stable, non-reversible handle for an id or session key (12 hex characters)."""
    if value is None:
        return None
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:12]
