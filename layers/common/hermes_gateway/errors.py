"""Domain errors, in one module. Handlers map them to responses in one place each."""

from __future__ import annotations


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""


class ConfigError(GatewayError):
    """A setting is missing or invalid; raised at synth time or cold start."""


class SecretUnreadable(ConfigError):
    """A secret could not be read for a reason other than its absence: the function's role may not
    read the parameter, or its KMS key refuses to decrypt it. Never taken for "not set" (a webhook
    would be refused 401, a delivery dead-lettered): it is raised, so the function fails where its
    errors alarm sees it and the platform or the queue tries again."""


class BadRequest(GatewayError):
    """Malformed input: answered with 400 and a reason in the log."""


class UnknownProfile(BadRequest):
    """A profile this deployment does not serve (a webhook path, a queued message, an API call)."""


class PayloadTooLarge(GatewayError):
    """A body over the configured limit: answered with 413."""


class Unauthorized(GatewayError):
    """A webhook failed verification (wrong secret or signature): 401, nothing enqueued."""


class Conflict(GatewayError):
    """A conditional write lost: the item changed since it was read (or already exists)."""


class InvalidIdentifier(GatewayError):
    """A session id or key that could escape its storage namespace."""


class SessionBusy(GatewayError):
    """Another turn holds the session's lease; the message is retried after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TransientError(GatewayError):
    """A failure worth retrying (throttling, 5xx, timeouts). The turn workflow retries it by name."""


class PermanentError(GatewayError):
    """A failure that retrying cannot fix (a rejected request, a missing secret)."""


class RateLimited(TransientError):
    """The platform's flood control: wait `retry_after` seconds before the next request."""

    def __init__(self, retry_after: float, message: str = "") -> None:
        super().__init__(message or f"rate limited; retry after {retry_after:g} s")
        self.retry_after = retry_after


class TargetGone(PermanentError):
    """The chat is out of reach (the bot was blocked or removed, the chat does not exist).

    Recorded on the target and skipped until a later success. `migrate_to` names the chat's new id
    when the platform says it moved (a Telegram group that became a supergroup).
    """

    def __init__(self, message: str, migrate_to: str | None = None) -> None:
        super().__init__(message)
        self.migrate_to = migrate_to


class OutsideWindow(PermanentError):
    """The platform's customer service window with the person is closed (WhatsApp: their last
    message is more than 24 hours old): only a template may reach them (domain/service_window.py)."""


class OutcomeUnknown(PermanentError):
    """The platform answered in a way that leaves open whether the message was posted (a success
    without a message id). Never retried: the outbox records `unknown` rather than risk a duplicate."""


class LeaseLost(PermanentError):
    """The turn no longer holds its session's lease (it expired and was taken over)."""


class ModelUnavailable(PermanentError):
    """The model kept failing until the request's retry budget was spent. Not retried by the
    workflow (another try would double the wait past an execution's time): the turn apologizes."""
