"""Outbound media (BEHAVIOUR §6a): a reply's `MEDIA:` references made into stored files.

Each reference of a delivery is fetched once into the media bucket under
`<profile>/<session>/out/<delivery-id>-<n>`: a retried delivery finds it there and fetches nothing
again, and the platform's upload reads it from there. A reference is
- a URL: deployed, only `https` to a public address: the host is resolved and a private, loopback,
  link-local (the metadata service), shared, reserved or multicast address is refused, on every
  redirect too; local mode also takes `http(s)` on loopback (a laptop or a test serves files so);
- a key in the media bucket of a file the delivering turn's own session received
  (`<profile>/<session id>/<seq>-<n>`, the session id from the job, never from the model), never
  a file's record beside it (`.json`: a document's text, a voice note's transcript); a job of no
  session (a cron run, a push) attaches no stored file (BEHAVIOUR §11).
What cannot be had (refused, unreachable, over `media.max_bytes`, not found) raises
`MediaRefused`: the reply goes without it, with a short note; it is never retried.
"""

from __future__ import annotations

import ipaddress
import mimetypes
import posixpath
import socket
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from hermes_gateway import http_pool
from hermes_gateway.domain.media import INFO_SUFFIX, MEDIA_KINDS, OutboundMedia, kind_of_mime
from hermes_gateway.domain.ports import MediaStore
from hermes_gateway.errors import PermanentError
from hermes_gateway.platforms.outbound_media import LINK_SECONDS, MediaFile

FETCH_TIMEOUT_SECONDS = 20.0
MAX_MEDIA = 10  # files one reply attaches; more are named in the note
_NAME_CHARS = 120
Resolver = Callable[[str], list[str]]


class MediaRefused(PermanentError):
    """The reference cannot be attached; the text says why (never the URL: it may carry a token)."""


@dataclass(frozen=True)
class Fetching:
    """How references are fetched: the size limit, whether loopback http is allowed (local mode)."""

    store: MediaStore
    limit: int
    local: bool = False
    resolve: Resolver | None = None  # host -> addresses; None: the system's resolver


def outbound_key(profile: str | None, session: str | None, delivery_id: str, n: int) -> str:
    """Never one of the inbound keys (`<profile>/<session>/<seq>-<n>`): those have no `out/`."""
    return f"{profile or 'default'}/{session or 'push'}/out/{delivery_id}-{n}"


def stage(
    media: OutboundMedia, key: str, profile: str | None, how: Fetching, *, session_id: str | None = None
) -> MediaFile:
    """The file `media` names, stored at `key` (fetched now unless an earlier try stored it);
    a stored key only inside `session_id`'s files."""
    reference = media.reference
    if reference.startswith(("https://", "http://")):
        found = how.store.get(key)
        if found is None:
            found = fetch_public(reference, how)
            how.store.put(key, *found)
        stored, name = key, media.name or _url_name(reference)
    else:
        stored, name = _own_key(reference, profile, session_id), media.name or posixpath.basename(reference)
        found = how.store.get(stored)
        if found is None:
            raise MediaRefused("no such stored file (it may have expired)")
    data, mime = found
    if len(data) > how.limit:
        raise MediaRefused(f"the file is {len(data) / 1e6:.1f} MB; the limit is {how.limit / 1e6:.0f} MB")
    mime = _mime(mime, name)
    return MediaFile(
        key=stored,
        kind=_kind(media.kind, mime),
        mime=mime,
        name=(name or "file")[:_NAME_CHARS],
        data=data,
        link=lambda: how.store.url(stored, LINK_SECONDS),
    )


def fetch_public(url: str, how: Fetching) -> tuple[bytes, str]:
    """GET `url` at most `how.limit` bytes, each hop (redirects followed here, at most
    http_pool.MAX_REDIRECTS) checked to lead to an allowed address first."""
    for _hop in range(http_pool.MAX_REDIRECTS + 1):
        address = check_url(url, local=how.local, resolve=how.resolve)
        try:  # to the address checked, not to what a second DNS answer says (a rebinding name)
            reply = http_pool.download(
                url, timeout=FETCH_TIMEOUT_SECONDS, limit=how.limit, redirects=False, connect_to=address
            )
        except http_pool.TooLarge:
            raise MediaRefused(f"the file is over the limit of {how.limit / 1e6:.0f} MB") from None
        except (http_pool.NoAnswer, http_pool.Unsendable) as exc:
            raise MediaRefused(f"the file could not be downloaded ({type(exc).__name__})") from None
        moved = reply.headers.get("location") if 300 <= reply.status < 400 else None
        if moved is None:
            if reply.status >= 300:
                raise MediaRefused(f"the file could not be downloaded (HTTP {reply.status})")
            content_type = (reply.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
            return reply.body, content_type
        url = urllib.parse.urljoin(url, moved)
    raise MediaRefused("the file's URL redirects too often")


def check_url(url: str, *, local: bool, resolve: Resolver | None = None) -> str:
    """Raise MediaRefused unless `url` may be fetched: https to public addresses only; in local
    mode http or https to loopback too. Every address the host resolves to must be allowed; the
    one to connect to is returned."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        raise MediaRefused("not a usable URL") from None
    if parts.scheme not in ("https", "http") or not host or parts.username is not None:
        raise MediaRefused("only https URLs are attached")
    addresses = _addresses(host, resolve)
    loopback = all(address.is_loopback for address in addresses)
    if local and loopback:
        return str(addresses[0])
    if parts.scheme != "https":
        raise MediaRefused("only https URLs are attached")
    if not all(address.is_global and not address.is_multicast for address in addresses):
        raise MediaRefused("the URL's host is not a public address")
    return str(addresses[0])


def _addresses(host: str, resolve: Resolver | None) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        found = (resolve or _system_resolve)(host)
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in found]
    except (OSError, ValueError, UnicodeError):
        raise MediaRefused("the URL's host cannot be resolved") from None
    if not addresses:
        raise MediaRefused("the URL's host cannot be resolved")
    # An IPv4-mapped IPv6 address (::ffff:10.0.0.1) is judged as the IPv4 address it is.
    return [a.ipv4_mapped if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped else a for a in addresses]


def _system_resolve(host: str) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)]


def _own_key(reference: str, profile: str | None, session_id: str | None) -> str:
    """A stored key the reply may attach: a file the delivering turn's session received (under
    `<profile>/<session id>/`, no path tricks), never a record (`.json`) nor a reply's staged copy."""
    key = reference.strip()
    if session_id is None:
        raise MediaRefused("a stored file is attached only to a reply in its own conversation")
    prefix = f"{profile or 'default'}/{session_id}/"
    name = key.removeprefix(prefix)
    if not key.startswith(prefix) or not name or "/" in name or ".." in name or name.endswith(INFO_SUFFIX):
        raise MediaRefused("not a URL, nor a file of this conversation")
    return key


def _url_name(url: str) -> str:
    return urllib.parse.unquote(posixpath.basename(urllib.parse.urlsplit(url).path))


def _mime(mime: str, name: str) -> str:
    usable = mime and mime not in ("application/octet-stream", "binary/octet-stream")
    return mime if usable else (mimetypes.guess_type(name)[0] or "application/octet-stream")


def _kind(declared: str, mime: str) -> str:
    if declared in MEDIA_KINDS and declared != "sticker":
        return declared
    if mime in ("audio/ogg", "audio/opus"):
        return "voice"  # an Opus voice note: Telegram and WhatsApp show it as one
    return kind_of_mime(mime)
