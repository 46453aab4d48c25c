"""Every chat platform the gateway speaks, described once (data only, no platform code imported).

Settings, secrets, the deployed webhook routes, the ingress adapters and the delivery senders are
all derived from this table: adding a platform is one entry here plus its module. The adapter and
sender are named as "module:attribute" strings and imported only when first used, so a function
pays at cold start only for the platforms it actually serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    """A platform-specific setting (not a secret): `platforms.<name>.<attr>` or the env variable."""

    attr: str
    env: str
    kind: str  # str | bool | int | list | url (https; http only to loopback)
    default: object
    doc: str
    pattern: str = ""  # a value must match it whole (empty allowed); `form` says what it looks like
    form: str = ""


@dataclass(frozen=True)
class PlatformSpec:
    name: str  # the webhook path segment and the `platform` of every source
    title: str
    inbound: str  # "module:Class"; the class is built with an `AdapterContext`
    sender: str | None  # "module:function" building a Sender (or None without credentials)
    text_limit: int  # characters per message; longer replies are split (BEHAVIOUR §6)
    inbound_secrets: tuple[str, ...] = ()  # read by the ingress function
    send_secrets: tuple[str, ...] = ()  # read by the delivery function
    methods: tuple[str, ...] = ("POST",)
    subpaths: bool = False  # also route /webhooks/<name>/{proxy+} (Matrix transactions)
    options: tuple[Option, ...] = ()
    api_base_url: str | None = ""  # the default of `<NAME>_API_BASE_URL`; None: the platform has no API
    enabled: bool = False  # the default of `<NAME>_ENABLED`
    local_only: bool = False  # never routed in a deployment (the web chat page)
    # Besides the inbound secrets, the settings (env names) without which nothing can be verified.
    verify_settings: tuple[str, ...] = ()
    # How long the platform may deliver one event again (seconds; None: until it is answered, with
    # no bound): an inbox that de-duplicates by event id keeps each id at least this long.
    retry_window_seconds: int | None = 0
    # "module:function" fetching an inbound attachment's bytes (platforms/media.py), with the
    # send secrets; None: the platform's attachments are named to the model, never fetched.
    media: str | None = None
    # False: the platform's messages do not come by webhook (e-mail: SES invokes the ingress
    # function itself), so it has no route, no webhook URL and no `verify`/`parse` request path.
    webhook: bool = True

    @property
    def verify_env(self) -> tuple[str, ...]:
        """Every secret or setting the inbound side needs before it can accept a webhook."""
        return self.inbound_secrets + self.verify_settings

    def webhook_paths(self, profile: str | None = None) -> tuple[str, ...]:
        """The deployed routes' paths (API Gateway syntax); a named profile's under `/p/<profile>`."""
        base = webhook_path(self.name, profile)
        return (base, base + "/{proxy+}") if self.subpaths else (base,)

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.inbound_secrets + self.send_secrets))


def webhook_path(platform: str, profile: str | None = None) -> str:
    """`/webhooks/<platform>`, or `/p/<profile>/webhooks/<platform>` for a named profile's bot."""
    return f"/p/{profile}/webhooks/{platform}" if profile else f"/webhooks/{platform}"


_M = "hermes_gateway.platforms."
HOUR, DAY = 3600, 24 * 3600

# fmt: off
CATALOG: tuple[PlatformSpec, ...] = (
    PlatformSpec(
        "telegram", "Telegram", _M + "telegram_inbound:TelegramInbound", _M + "telegram:build_sender", 4096,
        inbound_secrets=("TELEGRAM_WEBHOOK_SECRET",), send_secrets=("TELEGRAM_BOT_TOKEN",),
        api_base_url="https://api.telegram.org", enabled=True,
        retry_window_seconds=24 * HOUR,  # undelivered updates are kept 24 h
        media=_M + "telegram:fetch_media",
        options=(Option("group_sends_per_minute", "TELEGRAM_GROUP_SENDS_PER_MINUTE", "int", 20,
                        "messages a minute the bot sends one group at most, paced by the delivery (0: not paced)"),),
    ),
    PlatformSpec(
        "slack", "Slack", _M + "slack:SlackInbound", _M + "slack:build_sender", 39000,
        inbound_secrets=("SLACK_SIGNING_SECRET",), send_secrets=("SLACK_BOT_TOKEN",),
        api_base_url="https://slack.com/api",
        retry_window_seconds=HOUR,  # three retries within about an hour
        media=_M + "slack:fetch_media",
    ),
    PlatformSpec(
        "whatsapp", "WhatsApp Cloud API", _M + "whatsapp:WhatsAppInbound", _M + "whatsapp:build_sender", 4096,
        inbound_secrets=("WHATSAPP_APP_SECRET", "WHATSAPP_VERIFY_TOKEN"), send_secrets=("WHATSAPP_ACCESS_TOKEN",),
        methods=("GET", "POST"), api_base_url="https://graph.facebook.com/v21.0",
        options=(Option("phone_number_id", "WHATSAPP_PHONE_NUMBER_ID", "str", "",
                        "the business phone number id replies are sent from"),
                 Option("reengage_template", "WHATSAPP_REENGAGE_TEMPLATE", "str", "",
                        "name:language of an approved template with one body parameter: what a message sent "
                        "unasked (cron, send) goes as when the person last wrote over 24 hours ago (empty: refused)",
                        pattern=r"[a-z0-9_]{1,512}:[A-Za-z]{2,3}(_[A-Za-z0-9]{2,4})?", form="name:language")),
        retry_window_seconds=7 * DAY,  # Meta retries with backoff for up to 7 days
        media=_M + "whatsapp:fetch_media",
    ),
    PlatformSpec(
        "discord", "Discord", _M + "discord:DiscordInbound", _M + "discord:build_sender", 2000,
        send_secrets=("DISCORD_BOT_TOKEN",), api_base_url="https://discord.com/api/v10",
        verify_settings=("DISCORD_PUBLIC_KEY",),
        options=(
            Option("public_key", "DISCORD_PUBLIC_KEY", "str", "", "the application's public key (hex), not a secret"),
            Option("application_id", "DISCORD_APPLICATION_ID", "str", "", "the application id"),
            Option("command_name", "DISCORD_COMMAND_NAME", "str", "ask", "the slash command that talks to the agent"),
        ),
        retry_window_seconds=0,  # an interaction is never redelivered
        media=_M + "discord:fetch_media",
    ),
    PlatformSpec(
        "webhook", "Generic signed webhook", _M + "standard_webhook:GenericWebhookInbound",
        _M + "standard_webhook:build_callback_sender", 20000,
        inbound_secrets=("WEBHOOK_SIGNING_SECRET",), send_secrets=("WEBHOOK_SIGNING_SECRET",), api_base_url=None,
        options=(Option("callback_url", "WEBHOOK_CALLBACK_URL", "str", "",
                        "replies are POSTed here, signed with the same secret"),),
        retry_window_seconds=2 * DAY,  # the Standard Webhooks reference schedule ends after about a day
    ),
    PlatformSpec(
        "relay", "Relay (always-on forwarders)", _M + "relay:RelayInbound", _M + "relay:build_sender", 20000,
        inbound_secrets=("RELAY_SIGNING_SECRET",), send_secrets=("RELAY_SIGNING_SECRET",), api_base_url=None,
        options=(
            Option("callback_url", "RELAY_CALLBACK_URL", "str", "",
                   "replies to relay-delivered chats the gateway cannot reach itself are POSTed here"),
            Option("platforms", "RELAY_PLATFORMS", "list", ("discord", "signal", "matrix"),
                   "the platform names a relay may deliver for"),
        ),
        retry_window_seconds=DAY,  # a restarted relay resends what it had not delivered
    ),
    PlatformSpec(
        "line", "LINE", _M + "line:LineInbound", _M + "line:build_sender", 5000,
        inbound_secrets=("LINE_CHANNEL_SECRET",), send_secrets=("LINE_CHANNEL_ACCESS_TOKEN",),
        api_base_url="https://api.line.me",
        retry_window_seconds=DAY,  # redelivery, when turned on, retries for about a day
        media=_M + "line:fetch_media",
    ),
    PlatformSpec(
        "sms", "Twilio SMS", _M + "twilio:TwilioInbound", _M + "twilio:build_sender", 1600,
        inbound_secrets=("TWILIO_AUTH_TOKEN",), send_secrets=("TWILIO_AUTH_TOKEN",),
        api_base_url="https://api.twilio.com",
        options=(
            Option("account_sid", "TWILIO_ACCOUNT_SID", "str", "", "the account SID (AC...)"),
            Option("from_number", "TWILIO_FROM_NUMBER", "str", "", "the E.164 number replies are sent from"),
            Option("public_url", "TWILIO_PUBLIC_URL", "str", "",
                   "the webhook URL exactly as registered in Twilio, when a proxy or custom domain changes it"),
        ),
        retry_window_seconds=0,  # no retries (a failure goes to the fallback URL)
        media=_M + "twilio:fetch_media",
    ),
    PlatformSpec(
        "teams", "Microsoft Teams", _M + "teams:TeamsInbound", _M + "teams:build_sender", 28000,
        send_secrets=("TEAMS_APP_PASSWORD",), verify_settings=("TEAMS_APP_ID",),
        options=(
            Option("app_id", "TEAMS_APP_ID", "str", "", "the bot's Microsoft App ID (the token audience)"),
            Option("tenant_id", "TEAMS_TENANT_ID", "str", "",
                   "single-tenant bots: the tenant that issues send tokens (empty: botframework.com)"),
            Option("openid_url", "TEAMS_OPENID_URL", "str",
                   "https://login.botframework.com/v1/.well-known/openidconfiguration",
                   "where the Bot Framework's signing keys are published"),
            Option("token_url", "TEAMS_TOKEN_URL", "str", "",
                   "the OAuth token endpoint for sending (empty: derived from tenant_id)"),
            Option("service_url_hosts", "TEAMS_SERVICE_URL_HOSTS", "list", ("smba.trafficmanager.net",),
                   "hosts a serviceUrl may name (https; *.host for subdomains; add a sovereign cloud's)"),
            Option("file_hosts", "TEAMS_FILE_HOSTS", "list", ("*.sharepoint.com",),
                   "hosts a file's downloadUrl may be on (OneDrive and SharePoint; add a sovereign cloud's)"),
        ),
        retry_window_seconds=HOUR,  # the Bot Connector retries a failed activity briefly
        media=_M + "teams:fetch_media",
    ),
    PlatformSpec(
        "google_chat", "Google Chat", _M + "google_chat:GoogleChatInbound", _M + "google_chat:build_sender", 4096,
        send_secrets=("GOOGLE_CHAT_SERVICE_ACCOUNT_JSON",), api_base_url="https://chat.googleapis.com/v1",
        verify_settings=("GOOGLE_CHAT_AUDIENCE",),
        options=(
            Option("audience", "GOOGLE_CHAT_AUDIENCE", "str", "",
                   "the token audience: the project number, or the endpoint URL for OIDC tokens"),
            Option("certs_url", "GOOGLE_CHAT_CERTS_URL", "str",
                   "https://www.googleapis.com/service_accounts/v1/jwk/chat@system.gserviceaccount.com",
                   "where Google Chat's signing keys are published"),
        ),
        retry_window_seconds=HOUR,  # no documented retries; an hour of margin
        media=_M + "google_chat:fetch_media",
    ),
    PlatformSpec(
        "matrix", "Matrix (application service)", _M + "matrix:MatrixInbound", _M + "matrix:build_sender", 30000,
        inbound_secrets=("MATRIX_HS_TOKEN",), send_secrets=("MATRIX_AS_TOKEN",),
        methods=("POST", "PUT", "GET"), subpaths=True,
        options=(Option("bot_user_id", "MATRIX_BOT_USER_ID", "str", "",
                        "the application service's bot user (@hermes:example.org)"),),
        retry_window_seconds=None,  # the homeserver resends a transaction until it is answered
        media=_M + "matrix:fetch_media",
    ),
    PlatformSpec(
        "feishu", "Feishu / Lark", _M + "feishu:FeishuInbound", _M + "feishu:build_sender", 30000,
        inbound_secrets=("FEISHU_ENCRYPT_KEY", "FEISHU_VERIFICATION_TOKEN"), send_secrets=("FEISHU_APP_SECRET",),
        api_base_url="https://open.feishu.cn/open-apis",
        options=(Option("app_id", "FEISHU_APP_ID", "str", "", "the app id (cli_...)"),),
        retry_window_seconds=8 * HOUR,  # retries at 15 s, 5 min, 1 h and 6 h
        media=_M + "feishu:fetch_media",
    ),
    PlatformSpec(
        "mattermost", "Mattermost", _M + "mattermost:MattermostInbound", _M + "mattermost:build_sender", 16383,
        inbound_secrets=("MATTERMOST_OUTGOING_TOKEN",), send_secrets=("MATTERMOST_BOT_TOKEN",),
        options=(Option("bot_user_id", "MATTERMOST_BOT_USER_ID", "str", "",
                        "the bot account's user id; its own posts are ignored"),),
        retry_window_seconds=0,  # an outgoing webhook is never retried
        media=_M + "mattermost:fetch_media",
    ),
    PlatformSpec(
        "email", "E-mail (Amazon SES)", _M + "email:EmailInbound", _M + "email:build_sender", 100_000,
        webhook=False,  # an SES receipt rule stores each message in S3 and invokes the ingress function
        options=(
            Option("address", "EMAIL_ADDRESS", "str", "",
                   "the address the agent receives mail at and answers from (hermes@example.com)"),
            Option("domain", "EMAIL_DOMAIN", "str", "",
                   "the domain SES receives mail for, verified in SES (empty: the address's domain)"),
            Option("rule_set", "EMAIL_RULE_SET", "str", "",
                   "the active SES receipt rule set the gateway's rule joins (empty: the stack's own, which "
                   "`hermes-gateway email activate` activates)"),
        ),
        retry_window_seconds=6 * HOUR,  # Lambda retries a failed asynchronous invoke for up to 6 hours
        media=_M + "email:fetch_media",
    ),
    PlatformSpec(
        "bluebubbles", "iMessage (BlueBubbles)", _M + "bluebubbles:BlueBubblesInbound", _M + "bluebubbles:build_sender",
        10000,  # iMessage sets no limit on a message's text; a screenful or two reads better anyway
        inbound_secrets=("BLUEBUBBLES_WEBHOOK_SECRET",), send_secrets=("BLUEBUBBLES_PASSWORD",), api_base_url=None,
        options=(
            Option("server_url", "BLUEBUBBLES_SERVER_URL", "url", "",
                   "the BlueBubbles server's URL as the gateway reaches it (e.g. its Cloudflare or ngrok URL)"),
            Option("private_api", "BLUEBUBBLES_PRIVATE_API", "bool", False,
                   "the server has its Private API helper: replies thread to the message and typing shows"),
        ),
        retry_window_seconds=0,  # the server posts a webhook once and never retries it
        media=_M + "bluebubbles:fetch_media",
    ),
    PlatformSpec(
        # Through the signal-cli forwarder (relays/signal-cli/): its messages arrive here signed,
        # and it collects the replies from its mailbox (platforms/mailbox.py): no send secret.
        "signal", "Signal (signal-cli forwarder)", _M + "signal:SignalInbound", _M + "signal:build_sender", 2000,
        inbound_secrets=("SIGNAL_RELAY_SECRET",), api_base_url=None,
        subpaths=True,  # /webhooks/signal/uploads and /webhooks/signal/outbox: the mailbox calls
        options=(Option("account", "SIGNAL_ACCOUNT", "str", "",
                        "the bot's Signal number (E.164): its own messages are ignored, another account's refused"),),
        retry_window_seconds=DAY,  # the forwarder keeps what it could not post and posts it again
        media=_M + "signal:fetch_media",
    ),
    PlatformSpec(
        "webchat", "Local web chat", _M + "webchat:WebchatInbound", _M + "webchat:build_sender", 8000,
        inbound_secrets=("WEBCHAT_TOKEN",), local_only=True, api_base_url=None,
        retry_window_seconds=0,  # the page does not retry
        media=_M + "webchat:fetch_media",
    ),
)
# fmt: on

BY_NAME = {spec.name: spec for spec in CATALOG}
PLATFORM_NAMES = tuple(BY_NAME)


def spec(name: str) -> PlatformSpec | None:
    return BY_NAME.get(name)


# The platforms whose sender can edit a message it sent (platforms.base.Editor): their answers
# stream by default (`<NAME>_STREAMING`).
STREAMING_PLATFORMS = ("telegram", "discord", "slack", "mattermost", "matrix", "feishu", "teams", "webchat")

# The platforms whose sender shows a spoken answer (a `voice` file, Ogg/Opus) as a voice note or an
# audio file the chat plays (platforms.outbound_media.MediaSender): answers are spoken only there
# (domain/voice.py). A new platform whose sender does so (BlueBubbles, Signal) adds its name.
VOICE_PLATFORMS = ("telegram", "whatsapp", "discord", "slack", "matrix", "mattermost", "bluebubbles")


def text_limit(platform: str, default: int = 4000) -> int:
    found = BY_NAME.get(platform)
    return found.text_limit if found else default


def load(reference: str) -> Any:
    """A "module:attribute" reference from this catalog, imported on first use."""
    import importlib

    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)
