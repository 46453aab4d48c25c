"""The names a turn's behaviour is configured with, apart from the turn's types: settings read
them in every function, the ingress among them, which needs none of what `domain.turns` imports."""

from __future__ import annotations

BUSY_MODES = ("queue", "interrupt", "steer")  # what a message does to a session's running turn
FOLLOWUP_MODES = ("each", "one")  # queued messages: a turn each, or one turn for them all
APPROVAL_SCOPES = ("once", "session", "always")  # how far a granted approval reaches
