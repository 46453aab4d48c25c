"""Fetching a message's attachments from its platform (BEHAVIOUR §6a), bounded by `media.max_bytes`.

Each platform module that can hand over media has a `fetch_media(context, attachment, limit)`
named in its catalogue entry (`PlatformSpec.media`): it finds the bytes from the attachment's
`ref` (a file id, a URL, a media id) with the platform's credentials and returns them as
`Fetched`. What cannot be fetched raises one of the errors below, so the turn can tell the chat
why; a platform's 429 or 5xx raises RateLimited or TransientError like a send does.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from hermes_gateway import http_pool
from hermes_gateway.domain.media import Attachment
from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.platforms.base import AdapterContext, Answer, HttpClient, header

DOWNLOAD_TIMEOUT_SECONDS = 30.0
_HELD_SENDERS = 16
SenderT = TypeVar("SenderT")


@dataclass(frozen=True)
class Fetched:
    data: bytes
    mime: str  # what the platform answered (Content-Type), else the attachment's own


class MediaTooLarge(PermanentError):
    """Over `media.max_bytes` (or over what the platform hands over, as Telegram's 20 MB)."""

    def __init__(self, size: int | None, limit: int) -> None:
        shown = f"{size / 1e6:.1f} MB" if size else "too large"
        super().__init__(f"the file is {shown}; the limit is {limit / 1e6:.0f} MB")
        self.size = size
        self.limit = limit


class MediaUnavailable(PermanentError):
    """The platform will not hand the file over (expired, deleted, no permission, no credentials)."""


Fetcher = Callable[[AdapterContext, Attachment, int], Fetched]


def too_large(attachment: Attachment, limit: int) -> MediaTooLarge | None:
    """The error for an attachment whose announced size is already over the limit."""
    if attachment.size is not None and attachment.size > limit:
        return MediaTooLarge(attachment.size, limit)
    return None


_senders: OrderedDict[tuple[int, Any], tuple[AdapterContext, Any]] = OrderedDict()
_senders_lock = threading.Lock()


def sender_for(context: AdapterContext, build: Callable[[AdapterContext], SenderT | None]) -> SenderT | None:
    """`build(context)` once per context: a platform whose downloads need an access token of its
    own (Teams, Google Chat, Feishu) fetches it once for all the attachments of a cold start."""
    key = (id(context), build)
    with _senders_lock:
        held = _senders.get(key)
        if held is None or held[0] is not context:
            held = (context, build(context))
            _senders[key] = held
            while len(_senders) > _HELD_SENDERS:
                _senders.popitem(last=False)
        result: SenderT | None = held[1]
        return result


def on_host(url: str, base_url: str) -> bool:
    """Whether `url` is on the host of `base_url` or one of its subdomains, by the same scheme: an
    absolute URL from a payload (a file's download URL) that may be given the platform's credentials."""
    try:
        target, base = urllib.parse.urlsplit(url), urllib.parse.urlsplit(base_url)
        host, home = (target.hostname or "").lower(), (base.hostname or "").lower()
        target.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        return False
    if not host or not home or target.username is not None or target.password is not None:
        return False
    return target.scheme == base.scheme and (host == home or host.endswith("." + home))


def download(
    client: HttpClient,
    url: str,
    *,
    limit: int,
    headers: Mapping[str, str] | None = None,
    mime: str = "",
    timeout: float = DOWNLOAD_TIMEOUT_SECONDS,
) -> Fetched:
    """GET `url` (absolute, or a path under the client's base URL) reading at most `limit` bytes.
    A redirect of a request with `headers` is followed once, without them. Errors never carry the
    URL or a header (the client's `scrub` takes its secrets out)."""
    target = url if url.startswith(("https://", "http://")) else client.base + url
    if not target.startswith(("https://", "http://")):
        raise MediaUnavailable(f"{client.platform}: not an http(s) URL")
    try:
        reply = http_pool.download(target, headers=headers, timeout=timeout, limit=limit)
        authorized = any(name.lower() == "authorization" for name in headers or {})
        moved = header(reply.headers, "location") if 300 <= reply.status < 400 and authorized else None
        if moved:
            # A file served from elsewhere (Twilio's media, a CDN): the platform's credentials stay
            # behind, the redirect is followed without them (http_pool follows any further ones).
            moved = urllib.parse.urljoin(target, moved)
            if not moved.startswith(("https://", "http://")):
                raise MediaUnavailable(f"{client.platform}: the media download redirects to a non-http(s) URL")
            reply = http_pool.download(moved, timeout=timeout, limit=limit)
    except http_pool.TooLarge as exc:
        raise MediaTooLarge(exc.size, limit) from None
    except http_pool.NoAnswer as exc:
        raise exc.transient(client.platform, client.scrub) from None
    except http_pool.Unsendable:
        raise MediaUnavailable(f"{client.platform}: the media URL or a credential is not usable") from None
    if reply.status >= 300:
        answer = Answer(reply.status, {}, reply.headers)
        error = client.failure(answer, gone=(), detail=f"HTTP {reply.status} for a media download")
        if isinstance(error, PermanentError):
            raise MediaUnavailable(str(error)) from None
        raise error
    if reply.status == 202:  # LINE's video or audio still being transcoded
        raise TransientError(f"{client.platform}: the file is still being prepared")
    content_type = (header(reply.headers, "content-type") or "").split(";", 1)[0].strip()
    usable = content_type and content_type not in ("application/octet-stream", "binary/octet-stream")
    return Fetched(reply.body, content_type if usable else (mime or content_type))
