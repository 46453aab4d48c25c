"""The deployment's observability plan, as the stack builds it: what the meter (which metric lines
a run writes) and the price model (what traces and metrics cost) both read, so neither imports
the other."""

from __future__ import annotations

import os
from typing import Any


def default_plan() -> Any:
    """The deployment's observability tier as the stack builds it (infra/capabilities/observability)."""
    # The plan's module imports the CDK (jsii starts Node.js): quiet about this machine's Node.js
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from hermes_gateway import wiring
    from hermes_gateway.resources import SCHEDULES
    from infra.capabilities.observability import ObservabilityPlan

    return ObservabilityPlan.of(wiring.settings(), {s.function for s in SCHEDULES})
