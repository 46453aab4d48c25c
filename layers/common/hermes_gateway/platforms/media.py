"""Fetching a message's attachments from its platform (BEHAVIOUR §6a), bounded by `media.max_bytes`.

Each platform module that can hand over media has a `fetch_media(context, attachment, limit)`
named in its catalogue entry (`PlatformSpec.media`): it finds the bytes from the attachment's
`ref` (a file id, a URL, a media id) with the platform's credentials and returns them as
`Fetched`. Most platforms differ only in data, a `MediaSource` (which ref names the file, the
credentials, the download's path or the hosts a URL may point to, a lookup first), fetched by
`fetch_from`; the others (Telegram's token in the path, Google Chat's and Feishu's own tokens, a
Teams image) build their request themselves and share `download`. A file a platform's client
uploaded into the media bucket first (the web chat page, the Signal forwarder) is read from there
(`stored_upload`).

Every download goes through `safe_fetch`: the platform's configured hosts (its API base URL, a
host list in its settings) as they are, any other hop (a URL from a payload on the platform's
public hosts, a redirect) only to public addresses; credentials never follow a redirect to
another host. What cannot be fetched raises one of the errors below (the model is told, the log
keeps the reason); a platform's 429 or 5xx raises RateLimited or TransientError like a send does.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from hermes_gateway import http_pool, safe_fetch
from hermes_gateway.domain.media import Attachment
from hermes_gateway.domain.ports import MediaStore
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


@dataclass(frozen=True)
class MediaSource:
    """How one platform hands over an attachment's bytes: what sets it apart, as data.

    `credentials(context)`: the headers the download carries (`{}`: it needs none; None: none
    are configured, so nothing is fetched); `query(context)` the same for credentials a platform
    reads from the URL's query string only (BlueBubbles' server password), added to the file's
    URL. The file is `path` on the download base (the API base URL, `api(context)`, or what `base`
    makes of it), formatted with the attachment's refs, URL-quoted; or, without a path, the URL
    the ref `ref` holds (or `locate` answers), which must be on the API base URL's host or one of
    `hosts(context)` (`*.example.com`: its subdomains), since the credentials go there. Hosts of
    the platform's own settings (`trusted`) are fetched as they are; the others (a CDN the
    platform names) only from public addresses."""

    platform: str
    ref: str  # the ref that names the file (it must be there, and match `shape`)
    credentials: Callable[[AdapterContext], Mapping[str, str] | None]
    path: str = ""
    shape: str = ""  # a regular expression the ref must match in full
    hosts: Callable[[AdapterContext], Collection[str]] = lambda context: ()
    trusted: Callable[[AdapterContext], Collection[str]] = lambda context: ()
    base: Callable[[str], str] = lambda api_base_url: api_base_url
    # (context, client, credentials, attachment, limit) -> the file's URL and type, looked up first
    locate: Callable[[AdapterContext, HttpClient, Mapping[str, str], Attachment, int], tuple[str, str]] | None = None
    missing: str = "no credentials or no reference to fetch the file with"
    # credentials in the URL's query string (None: not configured), and where the API is
    query: Callable[[AdapterContext], Mapping[str, str] | None] = lambda context: {}
    api: Callable[[AdapterContext], str] = lambda context: context.platform.api_base_url


def fetch_from(source: MediaSource, context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    """The attachment's bytes as `source` says the platform hands them over."""
    import re

    ref = media.ref.get(source.ref)
    headers, query = source.credentials(context), source.query(context)
    if headers is None or query is None or not ref or (source.shape and not re.fullmatch(source.shape, ref)):
        raise MediaUnavailable(f"{source.platform}: {source.missing}")
    over = too_large(media, limit)
    if over is not None:
        raise over
    api = source.api(context)
    secrets = (
        *(v.split(" ", 1)[-1] for v in headers.values()),
        *(form for v in query.values() for form in (v, urllib.parse.quote(v, safe=""), urllib.parse.quote_plus(v))),
    )
    http = HttpClient(source.base(api) if api else "", platform=source.platform, scrub=secrets)
    mime = media.mime
    if source.locate is not None:
        url, mime = source.locate(context, http, headers, media, limit)
    elif source.path:
        url = source.path.format(**{k: urllib.parse.quote(v, safe="") for k, v in media.ref.items()})
    else:
        url = ref
    if query:
        url += ("&" if "?" in url else "?") + urllib.parse.urlencode(query)
    trusted = tuple(source.trusted(context))
    if url.startswith(("https://", "http://")) and not (
        (api and on_host(url, api)) or _listed(url, (*source.hosts(context), *trusted))
    ):
        raise MediaUnavailable(
            f"{source.platform}: the file's URL is not on one of the platform's hosts; nothing is sent there"
        )
    return download(http, url, limit=limit, headers=headers, mime=mime, trusted=trusted)


def stored_upload(store: MediaStore | None, key: str, limit: int) -> Fetched:
    """A file its platform's client uploaded into the media bucket before posting the message
    (the web chat page, the Signal forwarder): read from there, within `limit`. The bucket is the
    gateway's own, so none of the rules for a platform's hosts apply; the size is checked before
    the bytes are read."""
    found = store.head(key) if store is not None else None
    if store is None or found is None:
        raise MediaUnavailable("the uploaded file is gone (it expired, or was never uploaded)")
    if found[0] > limit:
        raise MediaTooLarge(found[0], limit)
    stored = store.get(key)
    if stored is None:
        raise MediaUnavailable("the uploaded file is gone (it expired, or was never uploaded)")
    if len(stored[0]) > limit:
        raise MediaTooLarge(len(stored[0]), limit)
    return Fetched(stored[0], stored[1])


def _listed(url: str, hosts: Collection[str]) -> bool:
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        return False
    host = parts.hostname or ""
    return bool(host) and parts.username is None and safe_fetch.host_listed(host, hosts)


def bearer(secret: str) -> Callable[[AdapterContext], Mapping[str, str] | None]:
    """Credentials: the secret as a bearer token."""

    def credentials(context: AdapterContext) -> Mapping[str, str] | None:
        token = context.secret(secret)
        return {"Authorization": f"Bearer {token}"} if token else None

    return credentials


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
    trusted: Collection[str] = (),
) -> Fetched:
    """GET `url` (absolute, or a path under the client's base URL) reading at most `limit` bytes.
    The client's own host and `trusted` hosts are fetched as they are; any other hop only from a
    public address (`safe_fetch`). Redirects are followed, `headers` (the credentials) never to
    another host. Errors never carry the URL or a header (the client's `scrub` takes its secrets out)."""
    target = url if url.startswith(("https://", "http://")) else client.base + url
    if not target.startswith(("https://", "http://")):
        raise MediaUnavailable(f"{client.platform}: not an http(s) URL")
    own = urllib.parse.urlsplit(client.base).hostname if client.base else None
    policy = safe_fetch.Policy(trusted=(*trusted, *((own,) if own else ())))
    try:
        reply = safe_fetch.fetch(target, policy, limit=limit, timeout=timeout, headers=headers)
    except safe_fetch.Refused as exc:
        raise MediaUnavailable(f"{client.platform}: the media download was refused: {exc}") from None
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
