"""Microsoft Teams through the Bot Framework: token verification, activity normalization and sending
(PLATFORMS §6).

Inbound. The Bot Connector signs every activity with a JWT in `Authorization: Bearer`. It must be an
RS256 token signed by a key listed at the `jwks_uri` of the Bot Framework's OpenID configuration,
issued by `https://api.botframework.com` for the bot's App ID, unexpired (five minutes of skew), and
its `serviceurl` claim must equal the activity's `serviceUrl`: replies carry the bot's own access
token to that URL, so it must be one the Bot Framework vouched for. The signing key must also be
endorsed for the activity's `channelId`, as the Bot Framework SDKs require. Activities from other
channels than `msteams` (the Bot Framework also serves Web Chat and others) are ignored.

Ids. A Teams channel conversation id names the thread: `19:…@thread.tacv2;messageid=<root id>`. Its
part before `;` is the channel (`chat_id`), the message id the thread (`thread_id`), so a channel
thread is one conversation, and every top-level post in a channel starts one. Activity ids are not
promised to be unique beyond their conversation, so the event id is
`teams:<conversation id>:<activity id>`.

Outbound. A client-credentials token from Microsoft Entra ID (cached until shortly before it
expires) and `POST {serviceUrl}/v3/conversations/{conversation id}/activities`, with the service URL
and the full conversation id recorded at ingress in the reply context. The bot's token goes to that
URL, so it must also be https on a Bot Framework host (`service_url_hosts`: the commercial cloud's
by default; GCC, GCC High, DoD and China add theirs), both at ingress and when sending.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from hermes_gateway.domain.media import Attachment, attachment, kind_of_mime
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import (
    BadRequest,
    ConfigError,
    OutcomeUnknown,
    PermanentError,
    TransientError,
    Unauthorized,
)
from hermes_gateway.platforms import media as _media
from hermes_gateway.platforms.base import (
    AdapterContext,
    Answer,
    HttpClient,
    Target,
    object_field,
    object_or_empty,
    optional_str,
    required_str,
)
from hermes_gateway.platforms.jwt_keys import JwksCache, verify_bearer
from hermes_gateway.platforms.tokens import CachedToken, oauth_token
from hermes_gateway.services.ingress import HttpRequest, Ignored, Parsed, json_payload, read_json

if TYPE_CHECKING:
    from hermes_gateway.platforms.media import Fetched

BOT_FRAMEWORK_ISSUER = "https://api.botframework.com"
TEAMS_CHANNEL_ID = "msteams"
BOT_FRAMEWORK_SCOPE = "https://api.botframework.com/.default"
DEFAULT_TOKEN_TENANT = "botframework.com"  # noqa: S105 - a tenant name
TOKEN_URL_TEMPLATE = "https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token"  # noqa: S105 - a URL
# The Bot Framework SDKs name the claim "serviceurl"; the REST documentation writes "serviceUrl".
_SERVICE_URL_CLAIMS = ("serviceurl", "serviceUrl")

_CHAT_TYPES = {"personal": "dm", "groupChat": "group", "channel": "group"}
_WHAT = "teams activity"  # how a malformed field's BadRequest names the payload
_IGNORED_ACTIVITIES = {
    "conversationUpdate": "conversation_update",
    "installationUpdate": "installation_update",
    "typing": "typing",
    "messageReaction": "reaction",
    "messageUpdate": "edited",
    "messageDelete": "deleted",
    "invoke": "invoke",
    "event": "event",
}
_MESSAGE_ID_PART = re.compile(r";messageid=([^;]+)")
# A mention's tags around a name holding no other tag: each `<at>` scans only up to the next tag,
# so the scans never overlap and a body full of unclosed `<at>` is read in linear time.
_AT_TAG = re.compile(r"<at>((?:(?!</?at>).)*)</at>", re.DOTALL)
_MAX_BOT_MENTIONS = 16  # distinct tags naming the bot that are stripped; a message has one or two
_TENANT = re.compile(r"^[A-Za-z0-9.-]+$")
DEFAULT_SERVICE_URL_HOSTS = ("smba.trafficmanager.net",)
_LOOPBACK = ("127.0.0.1", "localhost", "::1")  # an emulator or a test's fake; plain http allowed
FILE_DOWNLOAD_INFO = "application/vnd.microsoft.teams.file.download.info"


def service_url_allowed(url: str, hosts: Collection[str]) -> bool:
    """Whether the bot's token may be sent to `url`: https (http on loopback only), no credentials
    in it, and a host in `hosts` (an entry `*.example.com` stands for its subdomains)."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        return False
    if parts.username is not None or parts.password is not None or not host:
        return False
    if parts.scheme != "https" and not (parts.scheme == "http" and host in _LOOPBACK):
        return False
    return any(host.endswith(entry[1:].lower()) if entry.startswith("*.") else host == entry.lower() for entry in hosts)


class TeamsInbound:
    """Verifies Bot Connector tokens (keys cached for the cold start) and normalizes activities."""

    def __init__(self, context: AdapterContext) -> None:
        self._context = context
        self._app_id = str(context.option("app_id") or "")
        self._service_hosts = tuple(context.option("service_url_hosts") or ())
        self._keys = JwksCache(
            HttpClient("", platform="teams", timeout=5.0),
            openid_config_url=str(context.option("openid_url")),
            clock=context.clock,
        )

    def verify(self, request: HttpRequest) -> None:
        if not self._app_id:
            raise Unauthorized("teams is not configured (no TEAMS_APP_ID); refusing every activity")
        # The activity names the channel the key must be endorsed for and the service URL the token
        # must vouch for. A body that is not an object is refused as malformed by `parse`.
        activity = _json_object(request.body)
        channel = activity.get("channelId") if activity is not None else None
        claims = verify_bearer(
            request.headers.get("authorization"),
            self._keys,
            issuers=(BOT_FRAMEWORK_ISSUER,),
            audience=self._app_id,
            clock=self._context.clock,
            endorsement=channel if isinstance(channel, str) and channel else None,
        )
        if activity is not None:
            claimed = next((claims[c] for c in _SERVICE_URL_CLAIMS if c in claims), None)
            if not isinstance(claimed, str) or claimed != activity.get("serviceUrl"):
                raise Unauthorized("the token's serviceUrl claim does not match the activity's serviceUrl")

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        return parse_activity(json_payload(request), received_at=received_at, service_url_hosts=self._service_hosts)


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = read_json(body)
    except BadRequest:
        return None
    return value if isinstance(value, dict) else None


def parse_activity(
    activity: Any, *, received_at: float, service_url_hosts: Collection[str] = DEFAULT_SERVICE_URL_HOSTS
) -> InboundMessage | Ignored:
    """One Bot Framework activity as an InboundMessage, or the reason it is ignored (BadRequest when
    it is malformed, or names a service URL outside `service_url_hosts`)."""
    if not isinstance(activity, dict):
        raise BadRequest("teams activity is not a JSON object")
    kind = activity.get("type")
    if not isinstance(kind, str) or not kind:
        raise BadRequest("teams activity has no type")
    if kind != "message":
        return Ignored(_IGNORED_ACTIVITIES.get(kind, "unsupported_activity"))
    if activity.get("channelId") != TEAMS_CHANNEL_ID:
        return Ignored("other_channel")
    activity_id = required_str(activity, "id", "teams activity")
    conversation = object_field(activity, "conversation", _WHAT, required=True)
    conversation_id = required_str(conversation, "id", "teams conversation")
    sender = object_field(activity, "from", _WHAT, required=True)
    sender_id = required_str(sender, "id", "teams from")
    service_url = required_str(activity, "serviceUrl", "teams activity")
    if not service_url_allowed(service_url, service_url_hosts):
        raise BadRequest("teams activity serviceUrl is not https on a Bot Framework host (TEAMS_SERVICE_URL_HOSTS)")
    recipient = object_or_empty(activity, "recipient")
    bot_id = recipient.get("id") if isinstance(recipient.get("id"), str) else None
    if bot_id is not None and sender_id == bot_id:
        return Ignored("own_message")
    chat_type = _chat_type(conversation)
    if chat_type is None:
        return Ignored("unsupported_conversation")
    raw_text = activity.get("text")
    if raw_text is not None and not isinstance(raw_text, str):
        raise BadRequest("teams activity text is not a string")
    text, mentioned = _strip_mentions(raw_text or "", activity.get("entities"), bot_id)
    media = attachments(activity)
    if not text and not media:
        return Ignored("no_text")
    chat_id, _, _ = conversation_id.partition(";")
    thread = _MESSAGE_ID_PART.search(conversation_id) if conversation.get("conversationType") == "channel" else None
    channel_data = object_or_empty(activity, "channelData")
    source = SessionSource(
        platform="teams",
        chat_id=chat_id,
        chat_type=chat_type,
        user_id=sender_id,
        user_name=optional_str(sender, "name"),
        thread_id=thread.group(1) if thread else None,
        chat_name=_chat_name(conversation, channel_data, sender, chat_type),
        user_id_alt=optional_str(sender, "aadObjectId"),
        is_bot=sender.get("role") == "bot",
        scope_id=optional_str(object_or_empty(channel_data, "tenant"), "id") or optional_str(conversation, "tenantId"),
        message_id=activity_id,
    )
    return InboundMessage(
        source=source,
        text=text,
        event_id=f"teams:{conversation_id}:{activity_id}",
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in media),
        reply_to_message_id=optional_str(activity, "replyToId"),
        facts=("mentions_bot",) if mentioned else (),
        reply_context={"service_url": service_url, "conversation_id": conversation_id, "reply_to_id": activity_id},
    )


def attachments(activity: Mapping[str, Any]) -> tuple[Attachment, ...]:
    """A message's files and images as references. A file (`…teams.file.download.info`) has a
    pre-authenticated download URL; an image pasted in a chat (`image/*`) a `contentUrl` on the
    Bot Framework, fetched with the bot's token. The HTML and card attachments that repeat the
    text, and anything without a URL, are left out."""
    raw = activity.get("attachments")
    found = []
    for item in raw if isinstance(raw, list) else ():
        if not isinstance(item, dict) or not isinstance(item.get("contentType"), str):
            continue
        content_type, name = item["contentType"], item.get("name", "")
        if content_type == FILE_DOWNLOAD_INFO:
            content = object_or_empty(item, "content")
            mime = _mime_of_file_type(content.get("fileType"))
            found.append(attachment(kind_of_mime(mime), mime=mime, name=name, download_url=content.get("downloadUrl")))
        elif kind_of_mime(content_type, "") and isinstance(item.get("contentUrl"), str):
            mime = "" if content_type.endswith("/*") else content_type
            found.append(attachment(kind_of_mime(content_type), mime=mime, name=name, url=item["contentUrl"]))
    return tuple(found)


def _mime_of_file_type(file_type: Any) -> str:
    import mimetypes

    if not isinstance(file_type, str) or not file_type.isalnum():
        return ""
    return mimetypes.guess_type(f"file.{file_type}")[0] or ""


def _chat_type(conversation: Mapping[str, Any]) -> str | None:
    kind = conversation.get("conversationType")
    if kind is None:  # older activities say only whether the conversation is a group
        return "group" if conversation.get("isGroup") is True else "dm"
    return _CHAT_TYPES.get(str(kind))


def _chat_name(
    conversation: Mapping[str, Any], channel_data: Mapping[str, Any], sender: Mapping[str, Any], chat_type: str
) -> str | None:
    if chat_type == "dm":
        return optional_str(sender, "name")
    return optional_str(conversation, "name") or optional_str(object_or_empty(channel_data, "channel"), "name")


def _strip_mentions(text: str, entities: Any, bot_id: str | None) -> tuple[str, bool]:
    """The text without the bot's `<at>…</at>` mention (other mentions keep their name), and whether
    the bot was mentioned."""
    mentioned = False
    tags: set[str] = set()
    for entity in entities if isinstance(entities, list) else ():
        if not isinstance(entity, dict) or entity.get("type") != "mention":
            continue
        target = entity.get("mentioned")
        if bot_id is not None and isinstance(target, dict) and target.get("id") == bot_id:
            mentioned = True
            tag = entity.get("text")
            if isinstance(tag, str) and tag and len(tags) < _MAX_BOT_MENTIONS:
                tags.add(tag)
    for tag in tags:  # each replace reads the whole text: their number is bounded
        text = text.replace(tag, "")
    return _AT_TAG.sub(r"\1", text).strip(), mentioned


class TeamsSender:
    """Posts activities to the Bot Connector with an Entra ID client-credentials token."""

    def __init__(
        self,
        *,
        app_id: str,
        password: str,
        token_url: str,
        clock: Callable[[], float] = time.time,
        timeout: float = 10.0,
        service_url_hosts: Collection[str] = DEFAULT_SERVICE_URL_HOSTS,
    ) -> None:
        self._app_id = app_id
        self._service_hosts = tuple(service_url_hosts)
        self._password = password
        self._token_url = token_url
        self._timeout = timeout
        self._auth = HttpClient("", platform="teams", timeout=timeout, scrub=(password,))
        self._token = CachedToken(clock=clock)
        self._connector = self._auth

    def __repr__(self) -> str:
        return f"TeamsSender(app_id={self._app_id!r})"

    def send(self, target: Target, text: str) -> str:
        url = self._activities(target)
        body: dict[str, Any] = {"type": "message", "text": text}
        reply_to = target.context.get("reply_to_id")
        if reply_to:
            body["replyToId"] = reply_to
        answer = self._authorized("POST", url, body)
        if answer.status in (200, 201, 202):
            activity_id = answer.json_object().get("id")
            if isinstance(activity_id, str) and activity_id:
                return activity_id
            raise OutcomeUnknown("teams answered without an activity id; the message may have been sent")
        if answer.status == 412:  # a precondition the connector asks to retry (rate-limit page)
            raise TransientError("teams: HTTP 412 precondition failed; retry later")
        raise self._connector.failure(answer, gone=(403, 404))

    def edit(self, target: Target, message_id: str, text: str) -> None:
        """The Bot Connector's update activity (`PUT .../activities/{id}`): a streamed answer's edit."""
        url = f"{self._activities(target)}/{quote(message_id, safe='')}"
        answer = self._authorized("PUT", url, {"type": "message", "id": message_id, "text": text})
        if answer.status in (200, 201, 202):
            return
        if answer.status == 412:
            raise TransientError("teams: HTTP 412 precondition failed; retry later")
        raise self._connector.failure(answer, gone=(403, 404))

    def _activities(self, target: Target) -> str:
        service_url = target.context.get("service_url", "")
        if not service_url.startswith(("https://", "http://")):
            raise PermanentError("teams: no service URL was recorded for this conversation; cannot reply")
        if not service_url_allowed(service_url, self._service_hosts):
            raise PermanentError("teams: the recorded service URL is not https on a Bot Framework host; not sending")
        conversation = target.context.get("conversation_id") or _conversation_id(target)
        return f"{service_url.rstrip('/')}/v3/conversations/{quote(conversation, safe='')}/activities"

    def _authorized(self, method: str, url: str, body: dict[str, Any]) -> Answer:
        answer = self._post(url, body, method)
        if answer.status == 401:
            # The token may have been revoked or rotated before its expiry: one fresh token, one retry.
            self._token.drop()
            answer = self._post(url, body, method)
        return answer

    def download(self, url: str, *, limit: int, mime: str) -> Fetched:
        """An attachment on a Bot Framework host (a pasted image's `contentUrl`), with the bot's token."""
        from hermes_gateway.platforms.media import MediaUnavailable, download

        if not service_url_allowed(url, self._service_hosts):
            raise MediaUnavailable("teams: the attachment is not on a Bot Framework host; the bot's token stays here")
        token = self._token.get(self._fetch_token)
        auth = {"Authorization": f"Bearer {token}"}
        return download(self._connector, url, limit=limit, headers=auth, mime=mime, trusted=self._service_hosts)

    def _post(self, url: str, body: dict[str, Any], method: str = "POST") -> Answer:
        token = self._token.get(self._fetch_token)
        return self._connector.request(method, url, json_body=body, headers={"Authorization": f"Bearer {token}"})

    def _fetch_token(self) -> tuple[str, float]:
        form = {
            "grant_type": "client_credentials",
            "client_id": self._app_id,
            "client_secret": self._password,
            "scope": BOT_FRAMEWORK_SCOPE,
        }
        token, lifetime = oauth_token(self._auth, self._token_url, form, default_lifetime=3600.0, name="teams")
        # Errors from the connector never carry a header, but scrub the token from them all the same.
        self._connector = HttpClient("", platform="teams", timeout=self._timeout, scrub=(self._password, token))
        return token, lifetime


def _conversation_id(target: Target) -> str:
    """The conversation a target names when no full id was recorded: a channel thread is
    `<channel>;messageid=<root>`."""
    if target.thread_id:
        return f"{target.chat_id};messageid={target.thread_id}"
    return target.chat_id


def token_url(context: AdapterContext) -> str:
    """The Entra ID token endpoint: the `token_url` option, else the tenant's (botframework.com for
    multi-tenant bots)."""
    explicit = str(context.option("token_url") or "")
    if explicit:
        if not explicit.startswith(("https://", "http://")):
            raise ConfigError("TEAMS_TOKEN_URL must be an http(s) URL")
        return explicit
    tenant = str(context.option("tenant_id") or "") or DEFAULT_TOKEN_TENANT
    if not _TENANT.match(tenant):
        raise ConfigError("TEAMS_TENANT_ID must be a tenant id or domain (letters, digits, '.', '-')")
    return TOKEN_URL_TEMPLATE.format(tenant=tenant)


# A file (a OneDrive or SharePoint upload) from its pre-authenticated download URL, which must be on
# one of `file_hosts`; no token is sent.
FILES = _media.MediaSource(
    "teams", "download_url", lambda context: {},
    trusted=lambda context: tuple(context.option("file_hosts") or ()),
    missing="the attachment has no URL to fetch it from",
)  # fmt: skip


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    """A file from its download URL (FILES), an image from the Bot Framework with the bot's token."""
    from hermes_gateway.platforms.media import MediaUnavailable, sender_for, too_large

    if media.ref.get("download_url"):
        return _media.fetch_from(FILES, context, media, limit)
    url = media.ref.get("url")
    if not url:
        raise MediaUnavailable("teams: the attachment has no URL to fetch it from")
    over = too_large(media, limit)
    if over is not None:
        raise over
    sender = sender_for(context, build_sender)
    if sender is None:
        raise MediaUnavailable("teams: no app id and password (TEAMS_APP_PASSWORD) to fetch the image with")
    return sender.download(url, limit=limit, mime=media.mime)


def build_sender(context: AdapterContext) -> TeamsSender | None:
    password = context.secret("TEAMS_APP_PASSWORD")
    app_id = str(context.option("app_id") or "")
    if not password or not app_id:
        return None
    return TeamsSender(
        app_id=app_id,
        password=password,
        token_url=token_url(context),
        clock=context.clock,
        service_url_hosts=tuple(context.option("service_url_hosts") or ()),
    )
