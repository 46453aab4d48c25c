"""Slack Events API: request signing, event normalization and chat.postMessage (PLATFORMS §2).

Inbound. Every request is signed: `X-Slack-Signature: v0=<hex HMAC-SHA256(signing secret,
"v0:<X-Slack-Request-Timestamp>:<raw body>")>`, and the timestamp must lie within five minutes of
the clock, in either direction, or the request is a replay. `url_verification` is answered with
its challenge. `event_callback` envelopes carrying `message` or `app_mention` events become
messages; everything else is acknowledged and ignored.

One message, one turn. A channel message that mentions the app is delivered twice: as a `message`
event (`message.channels` and friends) and as an `app_mention` event, each with its own outer
`event_id`. Slack's event id therefore cannot de-duplicate it. The event id used here names the
message itself, "slack:<team>:<channel>:<ts>", so whichever delivery arrives first is the turn and
the other is a duplicate (as is any retry of either). Because either may be first, both are
normalized identically: `mentions_bot` is read from the text (a `<@U…>` of the bot user listed in
the envelope's `authorizations`, or in the legacy `authed_users` of an install that sends only
those) for either event type, and the leading mention is stripped from both.
Retries (`X-Slack-Retry-Num`, `X-Slack-Retry-Reason`) are processed like first deliveries: the
ingress idempotency drops one that was already enqueued and accepts one whose first delivery failed
before it was.

Outbound. `chat.postMessage` with the bot token. Slack reports most failures as HTTP 200 with
`{"ok": false, "error": "<code>"}`; the codes are mapped in `SlackSender`. Slack has no key that
de-duplicates a repeated post, so a chunk of the outbox carries one in the message's metadata
(`hermes_outbox_chunk`, derived from its row by `send_key`). A try that comes after a failed one (a
timeout the platform may have taken) first looks for that metadata among the messages the channel
(or the thread) got since the chunk was recorded, and a message it finds is the chunk, not posted
again. The look needs the history scope of the conversation type (`im:history` for a DM, which the
bot has to read DMs; `channels:history` and friends elsewhere, which a bot answering only mentions
may lack); a look Slack refuses finds nothing, and the chunk is posted.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from hermes_gateway.domain.media import Attachment, attachment, kind_of_mime
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import (
    BadRequest,
    OutcomeUnknown,
    PermanentError,
    RateLimited,
    TargetGone,
    TransientError,
    Unauthorized,
)
from hermes_gateway.platforms import media as _media
from hermes_gateway.platforms.base import (
    PRESENCE_TIMEOUT_SECONDS,
    AdapterContext,
    Answer,
    Button,
    HttpClient,
    Target,
    header,
    object_or_empty,
    optional_str,
    required_str,
    retry_after_seconds,
    send_key,
)
from hermes_gateway.platforms.outbound_media import MediaFile
from hermes_gateway.services.ingress import (
    Handshake,
    HttpRequest,
    HttpResponse,
    Ignored,
    Parsed,
    json_payload,
    read_json,
    signed_timestamp,
)

if TYPE_CHECKING:
    from hermes_gateway.platforms.media import Fetched

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "x-slack-signature"
TIMESTAMP_HEADER = "x-slack-request-timestamp"
BUTTON_ACTION_PREFIX = "hermes_reply_"  # action ids of the gateway's own buttons
REPLAY_WINDOW_SECONDS = 300  # Slack's own verifiers use 60 * 5
THINKING_STATUS = "is thinking…"  # an assistant thread's status line while a turn runs

_MESSAGE_EVENTS = ("message", "app_mention")
# Subtypes that are still a person writing to the channel; every other subtype is a change or a notice.
_PERSON_SUBTYPES = ("file_share", "thread_broadcast", "me_message")
_SUBTYPE_REASONS = {"message_changed": "edited", "message_deleted": "deleted"}
_LEADING_MENTION = re.compile(r"^\s*<@([A-Z0-9]+)(?:\|[^>]*)?>[\s,:]*")
_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")

# chat.postMessage error codes (HTTP 200, ok:false) and what they mean for a delivery.
_GONE_ERRORS = frozenset(
    {"channel_not_found", "not_in_channel", "is_archived", "channel_is_archived", "account_inactive"}
)
_RATE_LIMIT_ERRORS = frozenset({"ratelimited", "rate_limited"})
# Slack's "try again later" codes. internal_error and fatal_error are not among them: Slack says
# part of the operation may have succeeded, and sending again could post the message twice.
_TRANSIENT_ERRORS = frozenset({"service_unavailable", "team_added_to_org"})


def signature(signing_secret: str, timestamp: str, body: bytes) -> str:
    """The `X-Slack-Signature` value Slack computes for this timestamp and raw body."""
    base = b"v0:" + timestamp.encode("ascii") + b":" + body
    return "v0=" + hmac.new(signing_secret.encode("utf-8"), base, hashlib.sha256).hexdigest()


def verify_request(headers: Mapping[str, str], body: bytes, signing_secret: str | None, now: float) -> None:
    """Accept the request only when Slack signed this exact body within the replay window."""
    if not signing_secret:
        raise Unauthorized("slack signing secret is not configured; refusing every request")
    presented = headers.get(SIGNATURE_HEADER)
    if not presented:
        raise Unauthorized("slack signature header is missing")
    timestamp = headers.get(TIMESTAMP_HEADER)
    if abs(now - signed_timestamp(timestamp, TIMESTAMP_HEADER)) > REPLAY_WINDOW_SECONDS:
        raise Unauthorized("stale timestamp: the request is more than 5 minutes from the gateway's clock")
    expected = signature(signing_secret, str(timestamp), body)
    if not hmac.compare_digest(presented.encode("utf-8"), expected.encode("ascii")):
        raise Unauthorized("slack signature does not match")


def parse_event(payload: Any, *, received_at: float) -> Parsed:
    """One verified Events API request as a handshake, a message, or the reason it is ignored.

    Raises BadRequest when the request is malformed.
    """
    if not isinstance(payload, dict):
        raise BadRequest("slack payload is not a JSON object")
    kind = payload.get("type")
    if kind == "url_verification":
        challenge = payload.get("challenge")
        if not isinstance(challenge, str) or not challenge:
            raise BadRequest("slack url_verification has no challenge")
        return Handshake(HttpResponse(200, {"challenge": challenge}))
    if kind != "event_callback":
        return Ignored("unsupported_type")  # e.g. app_rate_limited
    event = payload.get("event")
    if not isinstance(event, dict):
        raise BadRequest("slack event_callback carries no event object")
    if event.get("type") not in _MESSAGE_EVENTS:
        return Ignored("unsupported_event")
    bot_users = _authorized_users(payload)
    subtype = event.get("subtype")
    author = event.get("user")
    if isinstance(author, str) and author in bot_users:
        return Ignored("own_message")  # the app's own reply, echoed back (a message.* subscription)
    if event.get("bot_id") or subtype == "bot_message":
        return Ignored("bot_message")
    if subtype is not None and subtype not in _PERSON_SUBTYPES:
        return Ignored(_SUBTYPE_REASONS.get(str(subtype), "unsupported_subtype"))
    return _message(payload, event, bot_users or _legacy_authed_users(payload), received_at)


def _message(
    payload: dict[str, Any], event: dict[str, Any], bot_users: frozenset[str], received_at: float
) -> InboundMessage | Ignored:
    channel = required_str(event, "channel", "slack message")
    ts = required_str(event, "ts", "slack message")
    user = required_str(event, "user", "slack message")
    team = payload.get("team_id") or event.get("team")
    if not isinstance(team, str) or not team:
        raise BadRequest("slack event has no team id")
    text = event.get("text", "")
    if not isinstance(text, str):
        raise BadRequest("slack message text is not a string")
    mentions_bot = any(user_id in bot_users for user_id in _MENTION.findall(text))
    text = _strip_leading_mention(text, bot_users)
    files = attachments(event)
    if not text.strip() and not files:
        return Ignored("no_text")
    thread_ts = event.get("thread_ts")
    # A thread's parent carries thread_ts == ts; only a reply lives in the thread.
    thread = thread_ts if isinstance(thread_ts, str) and thread_ts and thread_ts != ts else None
    source = SessionSource(
        platform="slack",
        chat_id=channel,
        chat_type=_chat_type(event, channel),
        user_id=user,
        thread_id=thread,
        scope_id=team,
        message_id=ts,
    )
    return InboundMessage(
        source=source,
        text=text,
        event_id=f"slack:{team}:{channel}:{ts}",
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in files),
        facts=("mentions_bot",) if mentions_bot else (),
    )


def attachments(event: Mapping[str, Any]) -> tuple[Attachment, ...]:
    """A message's `files` as references: a voice clip (subtype `slack_audio`) is a voice note,
    others are typed by their mime type. The private download URL is fetched with the bot token
    (a Slack Connect file that arrives without one, `file_access: check_file_info`, is looked up
    with files.info); an external file (a Google Drive link) or one Slack withholds (a tombstone,
    a file over the workspace's limit) is named only."""
    files = event.get("files")
    found = []
    for item in files if isinstance(files, list) else ():
        if not isinstance(item, dict):
            continue
        mime = optional_str(item, "mimetype") or ""
        kind = "voice" if item.get("subtype") == "slack_audio" else kind_of_mime(mime)
        fetchable = item.get("is_external") is not True and item.get("mode") not in ("tombstone", "hidden_by_limit")
        url = (item.get("url_private_download") or item.get("url_private")) if fetchable else None
        look_up = fetchable and not url and item.get("file_access") == "check_file_info"
        name = item.get("name") or item.get("title")
        found.append(
            attachment(
                kind, mime=mime, size=item.get("size"), name=name, url=url, file_id=item.get("id") if look_up else None
            )
        )
    return tuple(found)


def _authorized_users(payload: dict[str, Any]) -> frozenset[str]:
    """The app's bot user ids, from `authorizations[]`.

    Slack truncates the list to one installation and does not promise which one: when a person
    installed the app too, the entry may be that person, who is not the app. Only entries marked
    `is_bot` count.
    """
    authorizations = payload.get("authorizations")
    if not isinstance(authorizations, list):
        return frozenset()
    return frozenset(
        a["user_id"]
        for a in authorizations
        if isinstance(a, dict) and a.get("is_bot") is True and isinstance(a.get("user_id"), str) and a["user_id"]
    )


def _legacy_authed_users(payload: dict[str, Any]) -> frozenset[str]:
    """The deprecated `authed_users`, which older installs send instead of `authorizations`: there
    the app's bot user is among them. Read for mentions only, never to drop a message as the app's
    own: the list may name a person who installed the app."""
    users = payload.get("authed_users")
    if not isinstance(users, list):
        return frozenset()
    return frozenset(user for user in users if isinstance(user, str) and user)


def _strip_leading_mention(text: str, bot_users: frozenset[str]) -> str:
    found = _LEADING_MENTION.match(text)
    return text[found.end() :] if found and found.group(1) in bot_users else text


def _chat_type(event: dict[str, Any], channel: str) -> str:
    channel_type = event.get("channel_type")
    if channel_type == "im":
        return "dm"
    if channel_type is None and channel.startswith("D"):
        return "dm"  # app_mention events carry no channel_type; DM channel ids start with D
    return "group"


class SlackInbound:
    def __init__(self, context: AdapterContext) -> None:
        self._context = context

    def verify(self, request: HttpRequest) -> None:
        verify_request(
            request.headers, request.body, self._context.secret("SLACK_SIGNING_SECRET"), self._context.clock()
        )

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        if request.body.startswith(b"payload="):
            # Interactivity (a button press) arrives form-encoded at the same, equally signed URL.
            return parse_interaction(_form_payload(request.body), received_at=received_at)
        return parse_event(json_payload(request), received_at=received_at)


def _form_payload(body: bytes) -> Any:
    try:
        fields = parse_qs(body.decode("utf-8"), strict_parsing=True, errors="strict")
        return read_json(fields["payload"][0].encode("utf-8"), "slack interaction payload")
    except (ValueError, KeyError) as exc:  # UnicodeDecodeError is a ValueError
        raise BadRequest(f"slack interaction payload is malformed: {type(exc).__name__}") from None


def parse_interaction(payload: Any, *, received_at: float) -> InboundMessage | Ignored:
    """A press on one of the gateway's buttons (`block_actions`) as the presser's message, with the
    button's value as text: it then goes through the same authorization as a typed message."""
    if not isinstance(payload, dict):
        raise BadRequest("slack interaction payload is not a JSON object")
    if payload.get("type") != "block_actions":
        return Ignored("unsupported_interaction")
    actions = payload.get("actions")
    action = actions[0] if isinstance(actions, list) and actions and isinstance(actions[0], dict) else None
    if action is None or not str(action.get("action_id", "")).startswith(BUTTON_ACTION_PREFIX):
        return Ignored("unknown_action")
    value = action.get("value")
    if not isinstance(value, str) or not value.strip():
        return Ignored("no_text")
    user, team = object_or_empty(payload, "user"), object_or_empty(payload, "team")
    container, message = object_or_empty(payload, "container"), object_or_empty(payload, "message")
    channel = optional_str(container, "channel_id") or required_str(
        object_or_empty(payload, "channel"), "id", "slack interaction channel"
    )
    user_id = required_str(user, "id", "slack interaction user")
    team_id = optional_str(team, "id") or required_str(user, "team_id", "slack interaction user")
    action_ts = required_str(action, "action_ts", "slack interaction action")
    thread_ts, ts = message.get("thread_ts"), message.get("ts")
    thread = thread_ts if isinstance(thread_ts, str) and thread_ts and thread_ts != ts else None
    source = SessionSource(
        platform="slack",
        chat_id=channel,
        chat_type="dm" if channel.startswith("D") else "group",
        user_id=user_id,
        user_name=optional_str(user, "name"),
        thread_id=thread,
        scope_id=team_id,
    )
    return InboundMessage(
        source=source, text=value, event_id=f"slack:{team_id}:{channel}:action:{action_ts}", received_at=received_at
    )


def button_blocks(text: str, buttons: tuple[Button, ...]) -> list[dict[str, Any]]:
    """The text as a section, and the buttons under it (value: the reply a press sends)."""
    elements = [
        {
            "type": "button",
            "action_id": f"{BUTTON_ACTION_PREFIX}{index}",
            "text": {"type": "plain_text", "text": button.label[:75]},
            "value": button.reply[:2000],
        }
        for index, button in enumerate(buttons[:25])
    ]
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}},
        {"type": "actions", "elements": elements},
    ]


REPLY_METADATA = "hermes_outbox_chunk"  # the metadata event type that carries an outbox chunk's send key
LOOK_BACK_MESSAGES = 100  # the messages a retried chunk's look reads, posted since its first try
LOOK_BACK_MARGIN_SECONDS = 60.0  # ... and this much before it: this clock against Slack's


class SlackSender:
    """Posts with chat.postMessage; the bot token travels only in the Authorization header."""

    typing_refresh_seconds = 90.0  # an assistant thread's status clears after 2 minutes, or with the answer

    def __init__(self, api_base_url: str, token: str, timeout: float = 10.0) -> None:
        self._http = HttpClient(api_base_url, platform="slack", timeout=timeout, scrub=(token,))
        self._auth = {"Authorization": f"Bearer {token}"}  # a form-encoded request's headers
        # Slack warns about a JSON body without a charset.
        self._headers = {**self._auth, "Content-Type": "application/json; charset=utf-8"}

    def __repr__(self) -> str:
        return f"SlackSender({self._http.base!r})"

    def send(self, target: Target, text: str) -> str:
        """Post one message (a reply in the thread when the target has one); return its `ts`."""
        key, since = send_key(target), target.earlier_try_at
        if key and since is not None and (ts := self._posted_before(target, key, since)):
            return ts
        payload: dict[str, Any] = {"channel": target.chat_id, "text": text}
        if target.thread_id:
            payload["thread_ts"] = target.thread_id
        if key:
            payload["metadata"] = {"event_type": REPLY_METADATA, "event_payload": {"send_key": key}}
        if target.buttons and len(text) <= 3000:  # a section block holds 3000 characters
            payload["blocks"] = button_blocks(text, target.buttons)  # `text` stays the notification's fallback
        answer = self._http.request("POST", "/chat.postMessage", json_body=payload, headers=self._headers)
        if answer.status == 429:
            raise self._rate_limited(answer, "HTTP 429")
        if answer.status != 200:
            raise self._http.failure(answer, gone=())  # Slack's "gone" answers come as ok:false codes
        body = answer.body if isinstance(answer.body, dict) else None
        if body is None:
            raise OutcomeUnknown("slack answered HTTP 200 without a JSON body; the message may have been sent")
        if body.get("ok") is True:
            ts = body.get("ts")
            if isinstance(ts, str) and ts:
                return ts
            raise OutcomeUnknown("slack answered ok without a ts; the message may have been sent")
        raise self._refusal(answer, body)

    def _posted_before(self, target: Target, key: str, since: float) -> str | None:
        """The `ts` of the message an earlier try of this chunk posted: the messages of the
        channel (`conversations.history`, newest first) or thread (`conversations.replies`, oldest
        first) posted since the chunk was recorded, with their metadata, searched for the chunk's
        key. None when none has it, or when Slack refuses the look (a missing history scope, say):
        the caller posts. Raises on 429 and 5xx, as a post would."""
        form = {
            "channel": target.chat_id,
            "limit": str(LOOK_BACK_MESSAGES),
            "oldest": f"{since - LOOK_BACK_MARGIN_SECONDS:.6f}",
            "include_all_metadata": "true",
        }
        method = "/conversations.history"
        if target.thread_id:
            method, form["ts"] = "/conversations.replies", target.thread_id
        try:
            body = self._answered(self._http.request("POST", method, form=form, headers=self._auth))
        except PermanentError as refused:  # missing_scope, not_in_channel, …: the look cannot tell
            logger.warning("slack refused the look for an earlier try's message: %s", str(refused)[:120])
            return None
        for message in body.get("messages") or ():
            metadata = message.get("metadata") if isinstance(message, dict) else None
            if not isinstance(metadata, dict) or metadata.get("event_type") != REPLY_METADATA:
                continue
            payload = metadata.get("event_payload")
            ts = message.get("ts")
            if isinstance(payload, dict) and payload.get("send_key") == key and isinstance(ts, str) and ts:
                return ts
        return None

    def edit(self, target: Target, message_id: str, text: str) -> None:
        """`chat.update` of the bot's message `message_id` (its `ts`): a streamed answer's edit."""
        payload = {"channel": target.chat_id, "ts": message_id, "text": text}
        self._answered(self._http.request("POST", "/chat.update", json_body=payload, headers=self._headers))

    caption_limit = 3000  # the upload's initial comment

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        """Slack's external upload: `files.getUploadURLExternal`, the bytes to the URL it names,
        then `files.completeUploadExternal` shares the file in the channel (and thread), with the
        caption as its comment. Returns the file's id (the message's `ts` is not in the answer)."""
        ticket = self._answered(
            self._http.request(
                "POST",
                "/files.getUploadURLExternal",
                form={"filename": media.name, "length": str(media.size)},
                headers=self._auth,
            )
        )
        upload_url, file_id = ticket.get("upload_url"), ticket.get("file_id")
        if not isinstance(upload_url, str) or not isinstance(file_id, str) or not file_id:
            raise PermanentError("slack: files.getUploadURLExternal named no upload URL or file id")
        uploaded = self._http.request(
            "POST", upload_url, data=media.data, headers={"Content-Type": media.mime}, timeout=60.0
        )
        if uploaded.status != 200:
            raise self._http.failure(uploaded, gone=())
        payload: dict[str, Any] = {"files": [{"id": file_id, "title": media.name}], "channel_id": target.chat_id}
        if target.thread_id:
            payload["thread_ts"] = target.thread_id
        if caption:
            payload["initial_comment"] = caption
        self._answered(
            self._http.request("POST", "/files.completeUploadExternal", json_body=payload, headers=self._headers)
        )
        return file_id

    def _answered(self, answer: Answer) -> dict[str, Any]:
        """A Web API answer that is ok:true; else its error (429, 5xx, ok:false codes)."""
        if answer.status == 429:
            raise self._rate_limited(answer, "HTTP 429")
        if answer.status != 200:
            raise self._http.failure(answer, gone=())
        body = answer.json_object()
        if body.get("ok") is not True:
            raise self._refusal(answer, body)
        return body

    def typing(self, target: Target) -> bool:
        """`assistant.threads.setStatus`: Slack shows a status only in a thread of an app's
        assistant, which lives in the user's DM with the app (`D…`), so it is asked only in a DM's
        thread; a thread there that is not an assistant's is refused (ok:false), and the refusal
        ends the asking for this turn."""
        if not target.thread_id or not target.chat_id.startswith("D"):
            return False
        payload = {"channel_id": target.chat_id, "thread_ts": target.thread_id, "status": THINKING_STATUS}
        answer = self._http.request(
            "POST",
            "/assistant.threads.setStatus",
            json_body=payload,
            headers=self._headers,
            timeout=PRESENCE_TIMEOUT_SECONDS,
        )
        body = answer.json_object()
        if answer.status == 200 and body.get("ok") is True:
            return True
        if answer.status == 429:
            raise self._rate_limited(answer, "HTTP 429")
        if answer.status != 200:
            raise self._http.failure(answer, gone=())
        raise self._refusal(answer, body)

    def _refusal(self, answer: Answer, body: dict[str, Any]) -> Exception:
        error = body.get("error")
        code = self._http.scrub(error) if isinstance(error, str) and error else "unknown_error"
        if code in _RATE_LIMIT_ERRORS:
            return self._rate_limited(answer, code)
        if code in _GONE_ERRORS:
            return TargetGone(f"slack: target unreachable: {code}")
        if code in _TRANSIENT_ERRORS:
            return TransientError(f"slack is temporarily unavailable: {code}")
        return PermanentError(f"slack rejected the request: {code}")

    @staticmethod
    def _rate_limited(answer: Answer, code: str) -> RateLimited:
        seconds = retry_after_seconds(header(answer.headers, "retry-after"))
        return RateLimited(seconds, f"slack rate limit ({code}); retry after {seconds:g} s")


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    """The file's private download URL with the bot token (scope `files:read`), which only goes
    to Slack's own hosts (the API base URL's host and its subdomains, as files.slack.com)."""
    from hermes_gateway.platforms.media import MediaUnavailable, fetch_from

    fetched = fetch_from(MEDIA if media.ref.get("url") else CONNECT_MEDIA, context, media, limit)
    if fetched.mime == "text/html" and media.mime != "text/html":
        # Slack answers a token without files:read with its sign-in page, not an error.
        raise MediaUnavailable("slack answered a web page for the file: does the bot token have files:read?")
    return fetched


def _download_url(
    context: AdapterContext, http: HttpClient, auth: Mapping[str, str], media: Attachment, limit: int
) -> tuple[str, str]:
    """A Slack Connect file's download URL, from files.info (its size checked against the limit)."""
    import urllib.parse

    from hermes_gateway.platforms.media import MediaUnavailable, too_large

    file_id = media.ref.get("file_id", "")
    answer = http.request("GET", "/files.info?" + urllib.parse.urlencode({"file": file_id}), headers=auth)
    if answer.status == 429:
        raise SlackSender._rate_limited(answer, "HTTP 429")
    if answer.status >= 500:
        raise http.failure(answer, gone=())
    body = answer.json_object()
    found = body.get("file") if answer.status == 200 and body.get("ok") is True else None
    found = found if isinstance(found, dict) else {}
    url = optional_str(found, "url_private_download") or optional_str(found, "url_private")
    if not url:
        error = optional_str(body, "error") or f"HTTP {answer.status}"
        raise MediaUnavailable(f"slack files.info: {http.scrub(error)[:100]}")
    over = too_large(attachment("document", size=found.get("size")), limit)
    if over is not None:
        raise over
    return url, media.mime


_NO_FILE = "no bot token or no download URL to fetch the file with"
# The bot token goes with every download; a file's URL must be on Slack's hosts (the API's and its
# subdomains); a Slack Connect file is looked up with files.info first.
MEDIA = _media.MediaSource("slack", "url", _media.bearer("SLACK_BOT_TOKEN"), missing=_NO_FILE)
CONNECT_MEDIA = _media.MediaSource(
    "slack", "file_id", _media.bearer("SLACK_BOT_TOKEN"), locate=_download_url, missing=_NO_FILE
)


def build_sender(context: AdapterContext) -> SlackSender | None:
    token = context.secret("SLACK_BOT_TOKEN")
    return SlackSender(context.platform.api_base_url, token) if token else None
