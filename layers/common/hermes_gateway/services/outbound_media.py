"""Outbound media (BEHAVIOUR §6a): a reply's `MEDIA:` references made into stored files.

Each reference of a delivery is fetched once into the media bucket under
`<profile>/<session>/out/<delivery-id>-<n>`: a retried delivery finds it there and fetches nothing
again, and the platform's upload reads it from there. A reference is
- a URL: deployed, only `https` to a public address (`safe_fetch`): the host is resolved and a
  private, loopback, link-local (the metadata service), shared, reserved or multicast address is
  refused, on every redirect too; local mode also takes `http(s)` on loopback (a laptop or a test
  serves files so); the turn decided which URLs its reply may name (BEHAVIOUR §11);
- a key in the media bucket of a file the delivering turn's own session received
  (`<profile>/<session id>/<seq>-<n>`, the session id from the job, never from the model), never
  a file's record beside it (`.json`: a document's text, a voice note's transcript); a job of no
  session (a cron run, a push) attaches no stored file (BEHAVIOUR §11).
A file is streamed into the bucket through a spooled temporary file (on disk past SPOOL_BYTES), and
its bytes are read back only when its platform sends it, so a reply's files are never all in
memory at once. One deadline (`Fetching.deadline`) bounds the fetches of all of a reply's files.
What cannot be had (refused, unreachable, over `media.max_bytes`, not found, out of time) raises
`MediaRefused`: the reply goes without it, with a short note; it is never retried.
"""

from __future__ import annotations

import mimetypes
import posixpath
import tempfile
import urllib.parse
from dataclasses import dataclass
from typing import BinaryIO, cast

from hermes_gateway import http_pool, safe_fetch
from hermes_gateway.domain.media import INFO_SUFFIX, MEDIA_KINDS, OutboundMedia, kind_of_mime
from hermes_gateway.domain.ports import MediaStore
from hermes_gateway.errors import PermanentError
from hermes_gateway.platforms.outbound_media import LINK_SECONDS, MediaFile

FETCH_TIMEOUT_SECONDS = 20.0
MAX_MEDIA = 10  # files one reply attaches, unless media.max_attachments says otherwise
SPOOL_BYTES = 1024 * 1024  # a fetched file is held in memory up to this, on disk (/tmp) past it
_NAME_CHARS = 120
Resolver = safe_fetch.Resolver


class MediaRefused(PermanentError):
    """The reference cannot be attached; the text says why (never the URL: it may carry a token)."""


@dataclass(frozen=True)
class Fetching:
    """How references are fetched: the size limit, whether loopback http is allowed (local mode),
    and the time (time.monotonic()) by which every file of the reply must be fetched."""

    store: MediaStore
    limit: int
    local: bool = False
    resolve: Resolver | None = None  # host -> addresses; None: the system's resolver
    deadline: float | None = None
    max_files: int = MAX_MEDIA  # media.max_attachments: files one reply attaches; more are named in the note


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
        found = how.store.head(key)
        if found is None:
            found = _fetch_stored(reference, key, how)
        stored, name = key, media.name or _url_name(reference)
    else:
        stored, name = _own_key(reference, profile, session_id), media.name or posixpath.basename(reference)
        found = how.store.head(stored)
        if found is None:
            raise MediaRefused("no such stored file (it may have expired)")
    size, mime = found
    if size > how.limit:
        raise MediaRefused(f"the file is {size / 1e6:.1f} MB; the limit is {how.limit / 1e6:.0f} MB")
    mime = _mime(mime, name)
    return MediaFile(
        key=stored,
        kind=_kind(media.kind, mime),
        mime=mime,
        name=(name or "file")[:_NAME_CHARS],
        size=size,
        read=lambda: read_stored(how.store, stored),
        link=lambda: how.store.url(stored, LINK_SECONDS),
    )


def _fetch_stored(url: str, key: str, how: Fetching) -> tuple[int, str]:
    """`url` fetched into the bucket at `key` through a spooled file; its size and type."""
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spooled:
        spool = cast(BinaryIO, spooled)  # typeshed's SpooledTemporaryFile is no BinaryIO; it acts as one
        mime = fetch_public(url, how, spool)
        size = spool.tell()
        spool.seek(0)
        how.store.put_file(key, spool, mime)
    return size, mime


def read_stored(store: MediaStore, key: str) -> bytes:
    found = store.get(key)
    if found is None:
        raise MediaRefused("the stored file is gone (it may have expired)")
    return found[0]


def fetch_public(url: str, how: Fetching, into: BinaryIO) -> str:
    """GET `url` into `into` (at most `how.limit` bytes, by `how.deadline`), each hop checked to
    lead to an allowed address first; the answer's content type."""
    policy = safe_fetch.Policy(local=how.local, resolve=how.resolve)
    try:
        reply = safe_fetch.fetch(
            url, policy, limit=how.limit, timeout=FETCH_TIMEOUT_SECONDS, deadline=how.deadline, sink=into
        )
    except safe_fetch.Refused as exc:
        raise MediaRefused(str(exc)) from None
    except http_pool.TooLarge:
        raise MediaRefused(f"the file is over the limit of {how.limit / 1e6:.0f} MB") from None
    except http_pool.NoAnswer as exc:
        if exc.kind == "timeout" and how.deadline is not None:
            raise MediaRefused("it could not be fetched in the time the reply had") from None
        raise MediaRefused(f"the file could not be downloaded ({type(exc).__name__})") from None
    except http_pool.Unsendable as exc:
        raise MediaRefused(f"the file could not be downloaded ({type(exc).__name__})") from None
    if reply.status >= 300:
        raise MediaRefused(f"the file could not be downloaded (HTTP {reply.status})")
    return (reply.headers.get("content-type") or "").split(";", 1)[0].strip().lower()


def check_url(url: str, *, local: bool, resolve: Resolver | None = None) -> str:
    """Raise MediaRefused unless `url` may be fetched (safe_fetch.check); the address to connect to."""
    try:
        address = safe_fetch.check(url, safe_fetch.Policy(local=local, resolve=resolve))
    except safe_fetch.Refused as exc:
        raise MediaRefused(str(exc)) from None
    assert address is not None  # nothing is trusted here
    return address


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
