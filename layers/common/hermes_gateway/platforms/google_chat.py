"""Google Chat (HTTP endpoint apps): token verification, event normalization and sending (PLATFORMS §7).

Inbound. Every request carries `Authorization: Bearer <JWT>`, signed by Google. Which token depends on
the app's "Authentication Audience" (the `audience` option):
- a project number: a JWT issued by `chat@system.gserviceaccount.com` for that number, checked with
  the keys at `certs_url` (default: that account's published JWKS);
- the endpoint URL (an `https://` audience): a Google OIDC ID token (`iss` accounts.google.com) for
  that URL whose verified `email` is `chat@system.gserviceaccount.com`, checked with Google's OIDC
  keys, or with `certs_url` when it is set to something other than its default.
Only RS256 is accepted (platforms.jwt_keys). ID tokens of a per-project Workspace add-on service
agent (`service-<n>@gcp-sa-gsuiteaddons…`) are refused: nothing configured here pins the project.

Events. The classic interaction event (`type`: MESSAGE, ADDED_TO_SPACE, …) and the Workspace add-on
shape (`chat.messagePayload`, `chat.addedToSpacePayload`, …) are both read; only messages become turns.
The text is `argumentText` (the message without the app's @mention) when present. A message is in a
thread when `threadReply` is true (it was written inside a reply thread): its `thread.name` is the
thread and the reply goes there. A top-level message has no thread and is answered at the top level.
Every event is acknowledged with an empty JSON object: Chat reads a synchronous answer as a message
to post, and the reply comes later through the API. Ids keep Google's resource names (`spaces/AAA`,
`spaces/AAA/threads/BBB`, `users/123`); session keys may hold their interior '/'.

Outbound. A service-account key signs an RS256 assertion exchanged for an access token (scope
`chat.bot`, cached until shortly before it expires), then `POST {api}/{space}/messages`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hermes_gateway.domain.media import Attachment, attachment, kind_of_mime
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, ConfigError, OutcomeUnknown, PermanentError, Unauthorized
from hermes_gateway.platforms.base import (
    AdapterContext,
    Answer,
    HttpClient,
    Target,
    object_field,
    object_or_empty,
    optional_str,
    send_key,
)
from hermes_gateway.platforms.jwt_keys import JwksCache, verify_bearer
from hermes_gateway.platforms.tokens import CachedToken, oauth_token
from hermes_gateway.services.ingress import Accepted, HttpRequest, HttpResponse, Ignored, Parsed, json_payload

if TYPE_CHECKING:
    from hermes_gateway.platforms.media import Fetched

CHAT_ISSUER = "chat@system.gserviceaccount.com"
CHAT_CERTS_URL = "https://www.googleapis.com/service_accounts/v1/jwk/chat@system.gserviceaccount.com"
GOOGLE_OIDC_CERTS_URL = "https://www.googleapis.com/oauth2/v3/certs"
GOOGLE_OIDC_ISSUERS = ("https://accounts.google.com", "accounts.google.com")
CHAT_BOT_SCOPE = "https://www.googleapis.com/auth/chat.bot"
DEFAULT_TOKEN_URI = "https://oauth2.googleapis.com/token"  # noqa: S105 - a URL
JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ASSERTION_LIFETIME_SECONDS = 3600
REPLY_IN_THREAD = "REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD"

_SPACE = re.compile(r"^spaces/[A-Za-z0-9_-]+$")
_THREAD = re.compile(r"^(spaces/[A-Za-z0-9_-]+)/threads/[A-Za-z0-9_-]+$")
_WHAT = "google chat event"  # how a malformed field's BadRequest names the payload
_IGNORED_TYPES = {
    "ADDED_TO_SPACE": "added_to_space",
    "REMOVED_FROM_SPACE": "removed_from_space",
    "CARD_CLICKED": "card_clicked",
    "WIDGET_UPDATED": "widget_updated",
    "APP_HOME": "app_home",
    "SUBMIT_FORM": "submit_form",
}
# Workspace add-on events carry exactly one of these payloads under `chat`.
_ADDON_PAYLOADS = {
    "addedToSpacePayload": "added_to_space",
    "removedFromSpacePayload": "removed_from_space",
    "buttonClickedPayload": "card_clicked",
    "widgetUpdatedPayload": "widget_updated",
    "appCommandPayload": "app_command",
}


class GoogleChatInbound:
    """Verifies Google-signed bearer tokens (keys cached for the cold start) and normalizes events."""

    def __init__(self, context: AdapterContext) -> None:
        self._context = context
        self._audience = str(context.option("audience") or "")
        self._oidc = self._audience.startswith("https://")
        self._keys = JwksCache(
            HttpClient("", platform="google_chat", timeout=5.0),
            jwks_url=key_source(str(context.option("certs_url") or ""), oidc=self._oidc),
            clock=context.clock,
        )

    def verify(self, request: HttpRequest) -> None:
        if not self._audience:
            raise Unauthorized("google chat is not configured (no GOOGLE_CHAT_AUDIENCE); refusing every event")
        authorization = request.headers.get("authorization")
        if not self._oidc:
            verify_bearer(
                authorization, self._keys, issuers=(CHAT_ISSUER,), audience=self._audience, clock=self._context.clock
            )
            return
        claims = verify_bearer(
            authorization, self._keys, issuers=GOOGLE_OIDC_ISSUERS, audience=self._audience, clock=self._context.clock
        )
        if claims.get("email") != CHAT_ISSUER or claims.get("email_verified") not in (True, "true"):
            raise Unauthorized("the ID token was not issued to Google Chat's service account")

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        # Chat reads a synchronous answer as a message to post: an empty object posts nothing.
        parsed = parse_event(json_payload(request), received_at=received_at)
        return Accepted((parsed,), ack=HttpResponse(200, {}))


def key_source(certs_url: str, *, oidc: bool) -> str:
    """Where the signing keys come from: `certs_url` when it names its own source; at its default,
    the keys that sign the tokens of the configured audience mode."""
    if certs_url and certs_url != CHAT_CERTS_URL:
        return certs_url
    return GOOGLE_OIDC_CERTS_URL if oidc else CHAT_CERTS_URL


def parse_event(event: Any, *, received_at: float) -> InboundMessage | Ignored:
    """One Google Chat event (classic or add-on shape) as an InboundMessage, or the reason it is
    ignored (BadRequest when it is malformed)."""
    if not isinstance(event, dict):
        raise BadRequest("google chat event is not a JSON object")
    chat = event.get("chat")
    if isinstance(chat, dict):
        payload = chat.get("messagePayload")
        if not isinstance(payload, dict):
            return Ignored(next((code for key, code in _ADDON_PAYLOADS.items() if key in chat), "unsupported_event"))
        message = object_field(payload, "message", _WHAT, required=True)
        space, user = payload.get("space"), chat.get("user")
    else:
        kind = event.get("type")
        if not isinstance(kind, str) or not kind:
            raise BadRequest("google chat event has no type")
        if kind != "MESSAGE":
            return Ignored(_IGNORED_TYPES.get(kind, "unsupported_event"))
        message = object_field(event, "message", _WHAT, required=True)
        space, user = event.get("space"), event.get("user")
    return _message(
        message,
        space if isinstance(space, dict) else object_field(message, "space", _WHAT, required=True),
        user if isinstance(user, dict) else object_field(message, "sender", _WHAT, required=True),
        received_at,
    )


def _message(
    message: dict[str, Any], space: dict[str, Any], user: dict[str, Any], received_at: float
) -> InboundMessage | Ignored:
    name = _name(message, "message", "spaces/")
    space_name = _name(space, "space", "spaces/")
    if not _SPACE.match(space_name):
        raise BadRequest("google chat space name is not spaces/<id>")
    user_name = _name(user, "user", "users/")
    text = _text(message)
    media = attachments(message)
    if not text and not media:
        return Ignored("no_text")
    is_dm = (
        space.get("spaceType") == "DIRECT_MESSAGE" or space.get("type") == "DM" or space.get("singleUserBotDm") is True
    )
    source = SessionSource(
        platform="google_chat",
        chat_id=space_name,
        chat_type="dm" if is_dm else "group",
        user_id=user_name,
        user_name=optional_str(user, "displayName"),
        thread_id=_thread(message, space_name),
        chat_name=optional_str(user, "displayName") if is_dm else optional_str(space, "displayName"),
        is_bot=user.get("type") == "BOT",
        message_id=name,
    )
    return InboundMessage(
        source=source,
        text=text,
        event_id=f"google_chat:{name}",
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in media),
        facts=("mentions_bot",) if is_dm or _mentions_a_bot(message.get("annotations")) else (),
    )


def _text(message: Mapping[str, Any]) -> str:
    """`argumentText` (without the app's @mention), else `text`, stripped."""
    text = message.get("argumentText")
    if text is None:
        text = message.get("text")
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise BadRequest("google chat message text is not a string")
    return text.strip()


def attachments(message: Mapping[str, Any]) -> tuple[Attachment, ...]:
    """A message's `attachment[]` as references: an uploaded file's `attachmentDataRef.resourceName`
    is downloaded with the media API; a Google Drive file is named only (the app cannot read Drive)."""
    raw = message.get("attachment")
    found = []
    for item in raw if isinstance(raw, list) else ():
        if not isinstance(item, dict):
            continue
        mime = optional_str(item, "contentType") or ""
        data_ref = object_or_empty(item, "attachmentDataRef")
        found.append(
            attachment(
                kind_of_mime(mime), mime=mime, name=item.get("contentName", ""), resource=data_ref.get("resourceName")
            )
        )
    return tuple(found)


def _thread(message: Mapping[str, Any], space_name: str) -> str | None:
    """The reply thread a message was written in; None for a top-level message."""
    thread = message.get("thread")
    name = thread.get("name") if isinstance(thread, dict) else None
    if message.get("threadReply") is not True or not isinstance(name, str):
        return None
    matched = _THREAD.match(name)
    if matched is None or matched.group(1) != space_name:
        raise BadRequest("google chat thread name is not spaces/<space>/threads/<id> of the message's space")
    return name


def _mentions_a_bot(annotations: Any) -> bool:
    for annotation in annotations if isinstance(annotations, list) else ():
        if not isinstance(annotation, dict) or annotation.get("type") != "USER_MENTION":
            continue
        mention = annotation.get("userMention")
        mentioned = mention.get("user") if isinstance(mention, dict) else None
        if isinstance(mentioned, dict) and mentioned.get("type") == "BOT":
            return True
    return False


def _name(resource: Mapping[str, Any], what: str, prefix: str) -> str:
    value = resource.get("name")
    if not isinstance(value, str) or not value.startswith(prefix) or len(value) == len(prefix):
        raise BadRequest(f"google chat {what} has no {prefix}<id> name")
    return value


@dataclass(frozen=True)
class ServiceAccount:
    """The parts of a service-account key file the sender uses; the key never appears in a repr."""

    client_email: str
    private_key: str = field(repr=False)
    token_uri: str = DEFAULT_TOKEN_URI
    private_key_id: str | None = field(default=None, repr=False)

    @classmethod
    def from_json(cls, text: str) -> ServiceAccount:
        try:
            data = json.loads(text)
        except ValueError:
            raise ConfigError("GOOGLE_CHAT_SERVICE_ACCOUNT_JSON is not JSON") from None
        if not isinstance(data, dict):
            raise ConfigError("GOOGLE_CHAT_SERVICE_ACCOUNT_JSON is not a service-account key object")
        email, key = data.get("client_email"), data.get("private_key")
        if not isinstance(email, str) or not email or not isinstance(key, str) or "PRIVATE KEY" not in key:
            raise ConfigError("GOOGLE_CHAT_SERVICE_ACCOUNT_JSON needs client_email and private_key")
        token_uri = data.get("token_uri") or DEFAULT_TOKEN_URI
        if not isinstance(token_uri, str) or not token_uri.startswith(("https://", "http://")):
            raise ConfigError("GOOGLE_CHAT_SERVICE_ACCOUNT_JSON token_uri must be an http(s) URL")
        return cls(email, key, token_uri, optional_str(data, "private_key_id"))


class GoogleChatSender:
    """Creates messages with the Chat API as the app (service-account token, scope chat.bot)."""

    def __init__(
        self,
        account: ServiceAccount,
        *,
        api_base_url: str,
        clock: Callable[[], float] = time.time,
        timeout: float = 10.0,
    ) -> None:
        self._account = account
        self._clock = clock
        self._timeout = timeout
        self._base_url = api_base_url
        self._auth = HttpClient("", platform="google_chat", timeout=timeout, scrub=(account.private_key,))
        self._api = HttpClient(api_base_url, platform="google_chat", timeout=timeout)
        self._token = CachedToken(clock=clock)

    def __repr__(self) -> str:
        return f"GoogleChatSender({self._account.client_email!r})"

    def send(self, target: Target, text: str) -> str:
        if not _SPACE.match(target.chat_id):
            raise PermanentError("google chat: the target is not a space name (spaces/<id>)")
        import urllib.parse

        body: dict[str, Any] = {"text": text}
        query: dict[str, str] = {}
        if target.thread_id:
            matched = _THREAD.match(target.thread_id)
            if matched is None or matched.group(1) != target.chat_id:
                raise PermanentError("google chat: the target thread is not a thread of its space")
            query["messageReplyOption"] = REPLY_IN_THREAD
            body["thread"] = {"name": target.thread_id}
        key = send_key(target)
        if key:
            # Chat answers a repeated request id with the message it created then: a retried send
            # (a timeout after Chat took it) is not posted twice.
            query["requestId"] = key
        path = f"/{target.chat_id}/messages" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        answer = self._post(path, body)
        if answer.status == 401:
            # The token may have been revoked before its expiry: one fresh token, one retry.
            self._token.drop()
            answer = self._post(path, body)
        if answer.status == 200:
            name = answer.json_object().get("name")
            if isinstance(name, str) and name:
                return name
            raise OutcomeUnknown("google chat answered without a message name; the message may have been sent")
        raise self._api.failure(answer, gone=(403, 404))

    def download(self, resource_name: str, *, limit: int, mime: str) -> Fetched:
        """`GET {api}/media/{resourceName}?alt=media` with the app's token (scope chat.bot)."""
        import urllib.parse

        from hermes_gateway.platforms.media import MediaUnavailable, download

        if any(part in ("", ".", "..") for part in resource_name.split("/")):
            raise MediaUnavailable("google chat: the attachment's resource name is not usable")
        token = self._token.get(self._fetch_token)
        path = f"/media/{urllib.parse.quote(resource_name, safe='/+=:@')}?alt=media"
        return download(self._api, path, limit=limit, headers={"Authorization": f"Bearer {token}"}, mime=mime)

    def _post(self, path: str, body: dict[str, Any]) -> Answer:
        token = self._token.get(self._fetch_token)
        return self._api.request("POST", path, json_body=body, headers={"Authorization": f"Bearer {token}"})

    def _fetch_token(self) -> tuple[str, float]:
        form = {"grant_type": JWT_BEARER_GRANT, "assertion": self._assertion(self._clock())}
        token, lifetime = oauth_token(
            self._auth,
            self._account.token_uri,
            form,
            default_lifetime=float(ASSERTION_LIFETIME_SECONDS),
            name="google chat",
        )
        # Errors from the API never carry a header, but scrub the token from them all the same.
        self._api = HttpClient(self._base_url, platform="google_chat", timeout=self._timeout, scrub=(token,))
        return token, lifetime

    def _assertion(self, now: float) -> str:
        """The self-signed JWT a service account presents for a token (RFC 7523)."""
        import jwt

        issued = int(now)
        claims = {
            "iss": self._account.client_email,
            "scope": CHAT_BOT_SCOPE,
            "aud": self._account.token_uri,
            "iat": issued,
            "exp": issued + ASSERTION_LIFETIME_SECONDS,
        }
        headers = {"kid": self._account.private_key_id} if self._account.private_key_id else None
        try:
            return jwt.encode(claims, self._account.private_key, algorithm="RS256", headers=headers)
        except (jwt.PyJWTError, ValueError, TypeError):
            raise PermanentError("google chat: the service account's private_key is not a usable RSA key") from None


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    """An uploaded attachment through the Chat API's media download, as the app."""
    from hermes_gateway.platforms.media import MediaUnavailable, sender_for, too_large

    resource = media.ref.get("resource")
    if not resource:
        raise MediaUnavailable("google chat: the attachment has no media resource (a Drive file is not fetched)")
    over = too_large(media, limit)
    if over is not None:
        raise over
    sender = sender_for(context, build_sender)
    if sender is None:
        raise MediaUnavailable("google chat: no service account (GOOGLE_CHAT_SERVICE_ACCOUNT_JSON) to fetch it with")
    return sender.download(resource, limit=limit, mime=media.mime)


def build_sender(context: AdapterContext) -> GoogleChatSender | None:
    raw = context.secret("GOOGLE_CHAT_SERVICE_ACCOUNT_JSON")
    if not raw:
        return None
    api_base_url = context.platform.api_base_url or "https://chat.googleapis.com/v1"
    return GoogleChatSender(ServiceAccount.from_json(raw), api_base_url=api_base_url, clock=context.clock)
