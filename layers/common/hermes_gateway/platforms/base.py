"""What every platform module builds on: the adapter context, the send target, and one HTTP client.

Standard library only, but for the pooled HTTP client (`hermes_gateway.http_pool`, which imports
urllib3 on its first request). A platform module provides
- an inbound adapter class, built with an `AdapterContext`, with `verify(request)` (raise
  `Unauthorized`) and `parse(request, received_at)` (see `services.ingress.InboundAdapter`);
- `build_sender(context) -> Sender | None` (None when its credentials are not configured);
and is listed in `platforms.catalog`.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, runtime_checkable

from hermes_gateway import http_pool
from hermes_gateway.errors import BadRequest, ConfigError, PermanentError, RateLimited, TargetGone, TransientError

if TYPE_CHECKING:
    from hermes_gateway.domain.ports import MailStore
    from hermes_gateway.secrets import Secrets
    from hermes_gateway.settings import PlatformSettings, Settings

DEFAULT_RETRY_AFTER = 1.0
# A presence request (a typing indicator) gives up this soon: it is decoration, never worth a wait.
PRESENCE_TIMEOUT_SECONDS = 3.0


@dataclass(frozen=True)
class AdapterContext:
    """What a platform's adapter and sender are built with, once per cold start."""

    platform: PlatformSettings
    settings: Settings
    secrets: Secrets
    clock: Callable[[], float] = time.time  # injectable for signature timestamp windows
    # The e-mail SES stored (resources.MAIL), where the function is granted it: an e-mail
    # attachment is read from there. None elsewhere.
    raw_mail: MailStore | None = None

    def option(self, name: str) -> Any:
        return self.platform.options[name]

    def secret(self, name: str) -> str | None:
        return self.secrets.get(name)


@dataclass(frozen=True)
class Target:
    """Where one message goes. `context` holds the reply details a platform recorded at ingress
    (Teams' service URL, a LINE reply token, a Discord interaction token, `via: relay`)."""

    platform: str
    chat_id: str
    thread_id: str | None = None
    context: Mapping[str, str] = field(default_factory=dict)
    # Quick replies under the message (an approval's Approve/Deny). A sender that can show buttons
    # does; one that cannot ignores them: the text itself always says what to type instead.
    buttons: tuple[Button, ...] = ()
    # The outbox row of this chunk, stable across retries: a platform that echoes a reference in
    # its status reports (WhatsApp) or de-duplicates retried sends (LINE's retry key) is given it.
    delivery_id: str | None = None
    # The platform's id of the user's message this answers: a sender that can thread a reply to
    # it does (Telegram, Discord, WhatsApp); WhatsApp's typing indicator also needs it.
    reply_to: str | None = None
    # When an earlier try of this chunk failed (a timeout the platform may have taken): the time
    # its outbox row was recorded, before any try. A sender that can look for the message such a
    # try posted (Slack, by the send key in its metadata) looks among those posted since.
    earlier_try_at: float | None = None


def send_key(target: Target, size: int = 32) -> str | None:
    """The key a platform de-duplicates a repeated send on (Matrix's transaction id, Discord's
    nonce, Google Chat's request id, Feishu's uuid, Mattermost's pending post id), derived from
    the chunk's outbox row: the same on every try of that chunk, so a send the platform posted but
    answered too late (a timeout, which the outbox retries) does not post twice. None for a send
    with no row (a stream's first post)."""
    if not target.delivery_id:
        return None
    return hashlib.sha256(target.delivery_id.encode("utf-8")).hexdigest()[:size]


@dataclass(frozen=True)
class Button:
    """A button that, when pressed, sends `reply` into the chat as the presser's own message."""

    label: str
    reply: str

    @staticmethod
    def parse_all(raw: object) -> tuple[Button, ...]:
        """Buttons from a delivery job (`[{"label", "reply"}]`); anything malformed is left out."""
        if not isinstance(raw, list):
            return ()
        return tuple(
            Button(item["label"], item["reply"])
            for item in raw
            if isinstance(item, dict)
            and isinstance(item.get("label"), str)
            and isinstance(item.get("reply"), str)
            and item["label"].strip()
            and item["reply"].strip()
        )


class Sender(Protocol):
    def send(self, target: Target, text: str) -> str:
        """Send one chunk (within the platform's limit); return the platform's message id.

        Raise RateLimited (with retry_after), TransientError (5xx, timeouts), TargetGone (blocked,
        removed, not found) or PermanentError (anything else the platform refused).
        """
        ...


@runtime_checkable
class Presence(Protocol):
    """A sender that can also show a chat that the bot is at work (a typing indicator).

    A platform's indication fades by itself after a while (Telegram 5 s, Discord 10 s, WhatsApp
    25 s); whoever shows it repeats `typing` every `typing_refresh_seconds`, a little less."""

    typing_refresh_seconds: float

    def typing(self, target: Target) -> bool:
        """Show the indication once, within PRESENCE_TIMEOUT_SECONDS; False when this target has
        none (nothing was sent). Raise TransientError to be asked again at the next refresh,
        anything else to be asked no more."""
        ...


def presence_of(sender: Sender | None) -> Presence | None:
    """The sender's presence capability, when its platform has one."""
    return sender if isinstance(sender, Presence) else None


@runtime_checkable
class Editor(Protocol):
    """A sender that can change the text of a message it sent (a streamed answer's edits)."""

    def edit(self, target: Target, message_id: str, text: str) -> None:
        """Replace the text of the bot's message `message_id` in the target's chat (at most the
        platform's text limit). Text equal to what the message shows is not an error. Raises as
        `Sender.send` does."""
        ...


def editor_of(sender: Sender | None) -> Editor | None:
    """The sender's edit capability, when its platform has one."""
    return sender if isinstance(sender, Editor) else None


@runtime_checkable
class Reengager(Protocol):
    """A sender whose platform has a customer service window (domain/service_window.py): it can
    reach a person outside it with the re-engagement template the operator configured."""

    @property
    def reengage_template(self) -> str | None:
        """The template's name (None: none is configured, so nothing reaches the person)."""
        ...

    def reengage(self, target: Target, text: str) -> str:
        """Send the template with `text` as its body parameter; the platform's message id."""
        ...


def reengager_of(sender: Sender | None) -> Reengager | None:
    return sender if isinstance(sender, Reengager) else None


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any  # the decoded JSON body, or the text when it is not JSON, or None when empty
    headers: Mapping[str, str]

    def json_object(self) -> dict[str, Any]:
        return self.body if isinstance(self.body, dict) else {}


class HttpClient:
    """JSON (or form) over HTTPS, on the process's pooled connections (`hermes_gateway.http_pool`).
    Errors never carry a URL or a header (tokens live there): every value in `scrub` is replaced
    in the messages this client raises."""

    def __init__(self, base_url: str, *, platform: str, timeout: float = 10.0, scrub: tuple[str, ...] = ()) -> None:
        if base_url and not base_url.startswith(("https://", "http://")):
            raise ConfigError(f"the {platform} API base URL must be an http(s) URL")
        self.base = base_url.rstrip("/")
        self.platform = platform
        self.timeout = timeout
        self._scrub = tuple(s for s in scrub if s)

    def __repr__(self) -> str:
        return f"HttpClient({self.platform}, {self.base!r})"

    def scrub(self, text: str) -> str:
        for value in self._scrub:
            text = text.replace(value, "<redacted>")
        return text

    def request(
        self,
        method: str,
        path_or_url: str,
        *,
        json_body: Any = None,
        form: Mapping[str, str] | None = None,
        data: bytes | None = None,
        files: http_pool.FormFields | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Answer:
        """Send one request; any HTTP status comes back as an Answer. Connection failures and
        timeouts (the client's, or `timeout` for this request) raise TransientError. `files` is a
        multipart form (a field's value, or a file as (name, bytes, mime type))."""
        import urllib.parse

        url = path_or_url if path_or_url.startswith(("https://", "http://")) else self.base + path_or_url
        if not url.startswith(("https://", "http://")):
            raise PermanentError(f"{self.platform}: not an http(s) URL")
        sent_headers = dict(headers or {})
        if json_body is not None:
            data = json.dumps(json_body).encode("utf-8")
            sent_headers.setdefault("Content-Type", "application/json")
        elif form is not None:
            data = urllib.parse.urlencode(form).encode("utf-8")
            sent_headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        elif files is not None:
            data, sent_headers["Content-Type"] = http_pool.multipart(files)
        try:
            reply = http_pool.send(method, url, body=data, headers=sent_headers, timeout=timeout or self.timeout)
        except http_pool.NoAnswer as exc:
            raise exc.transient(self.platform, self.scrub) from None
        except http_pool.Unsendable:
            raise PermanentError(f"{self.platform}: the API URL or a credential is not usable in a request") from None
        return Answer(reply.status, _decode(reply.body), reply.headers)

    def failure(self, answer: Answer, *, gone: tuple[int, ...] = (403, 404, 410), detail: str = "") -> Exception:
        """The error for a non-success answer: 429 → RateLimited (Retry-After), 5xx → TransientError,
        a status in `gone` → TargetGone, any other → PermanentError."""
        text = self.scrub(detail or _describe(answer.body) or f"HTTP {answer.status}")
        if answer.status == 429:
            return RateLimited(retry_after_seconds(header(answer.headers, "retry-after")), f"{self.platform}: {text}")
        if answer.status >= 500 or answer.status in (408,):
            return TransientError(f"{self.platform} server error: HTTP {answer.status}: {text}")
        if answer.status in gone:
            return TargetGone(f"{self.platform}: target unreachable: HTTP {answer.status}: {text}")
        return PermanentError(f"{self.platform} rejected the request: HTTP {answer.status}: {text}")


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A response header by case-insensitive name."""
    lowered = name.lower()
    return next((v for k, v in headers.items() if k.lower() == lowered), None)


def optional_str(parent: Mapping[str, Any], key: str) -> str | None:
    """`parent[key]` when it is a non-empty string, else None (an optional text field of a payload)."""
    value = parent.get(key)
    return value if isinstance(value, str) and value else None


def required_str(parent: Mapping[str, Any], key: str, what: str) -> str:
    """`parent[key]`, a non-empty string; else BadRequest "<what> has no <key>"."""
    value = parent.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{what} has no {key}")
    return value


def object_or_empty(parent: Mapping[str, Any], key: str) -> dict[str, Any]:
    """`parent[key]` when it is a JSON object, else an empty one (an optional object of a payload)."""
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def object_field(parent: Mapping[str, Any], key: str, what: str, *, required: bool = False) -> dict[str, Any]:
    """`parent[key]`, a JSON object; an absent one is empty unless `required`. Anything else is
    BadRequest "<what> field '<key>' is not an object"."""
    value = parent.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"{what} field {key!r} is not an object")
    return value


def is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer (a boolean is not one, though Python says so)."""
    return isinstance(value, int) and not isinstance(value, bool)


def retry_after_seconds(*candidates: Any) -> float:
    """The first usable number of seconds among the candidates (a body field, a header)."""
    for candidate in candidates:
        try:
            seconds = float(candidate)
        except (TypeError, ValueError):
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return DEFAULT_RETRY_AFTER


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")[:500]


def _describe(body: Any) -> str:
    if isinstance(body, dict):
        for key in ("description", "error_description", "message", "error"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return value
            if isinstance(value, dict) and isinstance(value.get("message"), str):
                return str(value["message"])
        return ""
    return str(body)[:200] if body else ""
