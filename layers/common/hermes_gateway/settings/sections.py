"""The sections of gateway.yaml, one frozen dataclass each, every setting declared on its field.

A new setting is one `setting(...)` line in its section here (see `declare.py`); loading, the
environment overlay, the shipped settings file, named profiles and docs/configuration.md all
follow from it. `make reference` rewrites the documentation; gateway.example.yaml must show it too
(a test says so).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_gateway.domain.limits import LIMIT_NAMES, parse_overrides
from hermes_gateway.domain.media import FETCHED_KINDS, MEDIA_KINDS
from hermes_gateway.domain.reach import SEARCH_SCOPES
from hermes_gateway.domain.reset_policy import MODES as RESET_MODES
from hermes_gateway.domain.reset_policy import ResetPolicy, parse_policy_map
from hermes_gateway.domain.turn_modes import BUSY_MODES, FOLLOWUP_MODES
from hermes_gateway.platforms.catalog import STREAMING_PLATFORMS
from hermes_gateway.resources import INBOX_SOURCE
from hermes_gateway.settings.declare import (
    HTTP_URL_REASON,
    Invalid,
    Section,
    at_least,
    between,
    each,
    flag,
    fraction,
    group_map,
    http_url,
    is_http_url,
    known,
    matches,
    names,
    one_of,
    optional,
    positive,
    raises_value_error,
    setting,
    share,
    text,
    url,
    urls,
    whole,
)

PROVIDERS = ("echo", "openai", "bedrock")
WORKFLOW_TYPES = ("express", "standard")
TOOL_NAMES = ("memory", "session_search", "send_message", "cronjob")
MEMORY_PROVIDERS = ("", "honcho")
BOT_POLICIES = ("none", "mentions", "all")
OBSERVABILITY_TIERS = ("minimal", "standard", "full")  # infra/capabilities/observability.py builds from it
WEBHOOK_ENDPOINTS = ("http_api", "function_url")  # ingress.endpoint; infra/capabilities/api.py builds either
UNAUTHORIZED_DM_MODES = ("", "pair", "ignore")
STT_PROVIDERS = ("openai", "none")
TTS_PROVIDERS = ("openai", "polly", "none")
POLLY_ENGINES = ("standard", "neural", "long-form", "generative")
POLLY_MAX_CHARS = 3000  # billed characters in one SynthesizeSpeech request (adapters/polly_speech.py)
REPLY_TO_MODES = ("off", "first", "all")
MODEL_CALL_LIMIT_SECONDS = 80  # the Respond task may run 85 s (infra/statemachines/turn.asl.json)
TURN_LIMIT_SECONDS = 300  # an Express execution's longest run
# After the tool loop's last check of the execution's age, the most its tasks' limits allow:
# Respond 85 + RunTools 60 + Continue 10, which failing goes to Fail 10 (tests/unit/test_turn_budget.py
# reads them from the ASL).
CONTINUE_TAIL_SECONDS = 165
LEASE_MARGIN_SECONDS = 60  # a turn's lease outlives its time limit by this much


# fmt: off
@dataclass(frozen=True, kw_only=True)
class ProviderSettings(Section):
    """`provider:` the model behind the agent, and how one request to it is tried."""

    name: str = setting("GATEWAY_PROVIDER", text, "echo", "echo | openai | bedrock", check=one_of(PROVIDERS))
    model: str = setting("GATEWAY_MODEL", text, "", "model id for openai or bedrock")
    openai_base_url: str = setting(
        "OPENAI_BASE_URL", url, "https://api.openai.com/v1", "any OpenAI-compatible chat-completions base URL",
        check=http_url,
    )
    allowed_base_urls: tuple[str, ...] = setting(
        "GATEWAY_ALLOWED_BASE_URLS", urls, (),
        "base URLs a session's model override may use besides openai_base_url (OPENAI_API_KEY is sent there)",
        check=each(http_url),
    )
    timeout_seconds: int = setting(
        "GATEWAY_PROVIDER_TIMEOUT_SECONDS", whole, 60, "one model request's time limit",
        check=positive(at_most=MODEL_CALL_LIMIT_SECONDS, why="the Respond task's limit"),
    )
    max_history_messages: int = setting(
        "GATEWAY_MAX_HISTORY_MESSAGES", whole, 40, "transcript rows sent to the model",
        check=at_least(1, "must be greater than zero"),
    )
    context_window: int = setting(
        "GATEWAY_CONTEXT_WINDOW", whole, 0,
        "the model's context window in tokens (0: known from the model name, else 8192)",
        check=at_least(0, "must be 0 (from the model name) or more"),
    )
    max_output_tokens: int = setting(
        "GATEWAY_MAX_OUTPUT_TOKENS", whole, 0,
        "tokens one answer may take, kept free in the window (0: a quarter of the window, at most 4096)",
        check=at_least(0, "must be 0 (a quarter of the window) or more"),
    )
    max_attempts: int = setting(
        "GATEWAY_PROVIDER_MAX_ATTEMPTS", whole, 3, "tries of one model request on 429, 5xx and timeouts (with backoff)",
        check=between(1, 10),
    )
    retry_budget_seconds: int = setting(
        "GATEWAY_PROVIDER_RETRY_BUDGET_SECONDS", whole, 80,
        "one model request's tries and waits together stay within this",
    )
    vision: bool = setting(
        "GATEWAY_VISION", flag, True, "images go to the model as image parts (off: a short note names each image)",
    )

    def validate(self) -> None:
        if self.name != "echo" and not self.model:
            raise Invalid("model", f"is required for provider {self.name}")
        if not self.timeout_seconds <= self.retry_budget_seconds <= MODEL_CALL_LIMIT_SECONDS:
            raise Invalid(
                "retry_budget_seconds",
                f"must be at least provider.timeout_seconds and at most {MODEL_CALL_LIMIT_SECONDS} (the task's limit)",
            )
        if self.max_output_tokens and self.max_output_tokens * 2 > self.window:
            raise Invalid("max_output_tokens", "must be at most half of the context window")

    @property
    def window(self) -> int:
        """The context window in tokens: the setting, else the model's (domain/context.py)."""
        from hermes_gateway.domain.context import limits

        return limits(self.context_window, self.max_output_tokens, self.model)[0]

    @property
    def output_reserve(self) -> int:
        """Tokens kept free for the answer (and asked of the model as its max tokens)."""
        from hermes_gateway.domain.context import limits

        return limits(self.context_window, self.max_output_tokens, self.model)[1]


@dataclass(frozen=True, kw_only=True)
class CompressionSettings(Section):
    """`compression:` a long session is summarized before its history outgrows the model's window."""

    enabled: bool = setting(
        "GATEWAY_COMPRESSION_ENABLED", flag, True,
        "summarize the older part of a session when its history passes the threshold",
    )
    threshold: float = setting(
        "GATEWAY_COMPRESSION_THRESHOLD", fraction, 0.5,
        "share of the context window the history may fill before a turn compresses it", check=share(0.1, 0.9),
    )


@dataclass(frozen=True, kw_only=True)
class ToolSettings(Section):
    """`tools:` the agent's built-in tools (memory is always there)."""

    enabled: tuple[str, ...] = setting(
        "GATEWAY_TOOLS", names, ("session_search", "send_message", "cronjob"),
        "built-in tools besides memory: session_search, send_message, cronjob", check=known(TOOL_NAMES[1:], "tool"),
    )
    needs_approval: tuple[str, ...] = setting(
        "GATEWAY_TOOLS_NEEDING_APPROVAL", names, (), "tools whose calls wait for the user's /approve",
        check=known(TOOL_NAMES, "tool"),
    )
    session_search_scope: str = setting(
        "GATEWAY_SESSION_SEARCH_SCOPE", text, "user",
        "what session_search reads: user (a DM's user's sessions, a group's), chat (this chat's), "
        "profile (every session; admins always)",
        check=one_of(SEARCH_SCOPES),
    )
    send_message_targets: tuple[str, ...] = setting(
        "GATEWAY_SEND_MESSAGE_TARGETS", names, (),
        "targets send_message and cron jobs reach without an admin's approval, besides the turn's own chat and "
        "the home channels (platform:chat_id, platform:chat_id:thread_id or the target as written)",
    )


@dataclass(frozen=True, kw_only=True)
class MemorySettings(Section):
    """`memory:` durable notes per user and profile, and an optional external memory service."""

    max_notes: int = setting(
        "GATEWAY_MEMORY_MAX_NOTES", whole, 100, "memory notes kept per user and profile", check=between(1, 1000),
    )
    max_note_chars: int = setting(
        "GATEWAY_MEMORY_MAX_NOTE_CHARS", whole, 1000, "characters in one memory note", check=between(50, 4000),
    )
    external: str = setting(
        "GATEWAY_MEMORY_PROVIDER", text, "", "a memory provider beside the built-in notes: honcho (empty: none)",
        check=one_of(MEMORY_PROVIDERS, "must be honcho or empty"), wide=True,
    )
    honcho_base_url: str = setting(
        "HONCHO_BASE_URL", url, "https://api.honcho.dev", "the Honcho API (secret HONCHO_API_KEY)", wide=True,
    )
    honcho_workspace: str = setting(
        "HONCHO_WORKSPACE", text, "hermes", "the Honcho workspace id",
        check=matches(r"[A-Za-z0-9_-]{1,100}", "use 1-100 letters, digits, '_' or '-'", "1-100 of A-Z a-z 0-9 _ -"),
        wide=True,
    )

    def validate(self) -> None:
        if self.external == "honcho" and not is_http_url(self.honcho_base_url):
            raise Invalid("honcho_base_url", HTTP_URL_REASON)


@dataclass(frozen=True, kw_only=True)
class AccessSettings(Section):
    """`access:` who may talk to the gateway on every platform (each platform adds its own)."""

    allowed_users: tuple[str, ...] = setting("GATEWAY_ALLOWED_USERS", names, (), "user ids allowed on every platform")
    allow_all_users: bool = setting("GATEWAY_ALLOW_ALL_USERS", flag, False, "allow everyone on every platform")
    admins: tuple[str, ...] = setting("GATEWAY_ADMINS", names, (), "user ids that are admins on every platform")
    user_commands: tuple[str, ...] = setting(
        "GATEWAY_USER_COMMANDS", names, (), "gateway commands non-admins may run besides /help and /whoami",
    )


@dataclass(frozen=True, kw_only=True)
class LimitSettings(Section):
    """`limits:` what one user may spend, per user and profile, before a message reaches no model
    (BEHAVIOUR §11); 0 turns a limit off. Admins are exempt; a platform may set its own."""

    messages_per_minute: int = setting(
        "GATEWAY_LIMIT_MESSAGES_PER_MINUTE", whole, 20, "messages one user may send a minute (0: no limit)",
        check=at_least(0),
    )
    tokens_per_day: int = setting(
        "GATEWAY_LIMIT_TOKENS_PER_DAY", whole, 0, "model tokens one user's turns may use a day (0: no limit)",
        check=at_least(0),
    )
    usd_per_day: float = setting(
        "GATEWAY_LIMIT_USD_PER_DAY", fraction, 0.0,
        "estimated model cost one user's turns may reach a day, in USD (0: no limit)", check=at_least(0),
    )


@dataclass(frozen=True, kw_only=True)
class SessionSettings(Section):
    """`sessions:` how chats map to sessions, when a session is replaced, a turn's lease."""

    group_sessions_per_user: bool = setting(
        "GATEWAY_GROUP_SESSIONS_PER_USER", flag, True, "one session per user in a group",
    )
    thread_sessions_per_user: bool = setting(
        "GATEWAY_THREAD_SESSIONS_PER_USER", flag, False, "one session per user in a thread",
    )
    turn_timeout_seconds: int = setting(
        "GATEWAY_TURN_TIMEOUT_SECONDS", whole, 300, "a turn lease expires this long after it starts",
        check=positive(at_most=TURN_LIMIT_SECONDS, why="an Express workflow's limit"), wide=True,
    )
    busy_retry_seconds: int = setting(
        "GATEWAY_BUSY_RETRY_SECONDS", whole, 1,
        "the router's first pause before it retries a message whose session changed under it (then up to 5 s)",
        check=positive(at_most=INBOX_SOURCE.retry_pause_cap_seconds, why="the inbox consumer's longest pause"),
        wide=True,
    )
    reset_mode: str = setting(
        "GATEWAY_RESET_MODE", text, "none",
        "when a session is replaced by a new one: none | idle | daily | both (dm, group, channel)",
        check=raises_value_error(lambda v: ResetPolicy(mode=v), ", ".join(RESET_MODES)),
    )
    reset_idle_minutes: int = setting(
        "GATEWAY_RESET_IDLE_MINUTES", whole, 1440, "idle/both: a session idle this long is replaced",
        check=raises_value_error(lambda v: ResetPolicy(idle_minutes=v), "1 to 525600"),
    )
    reset_at_hour: int = setting(
        "GATEWAY_RESET_AT_HOUR", whole, 4, "daily/both: sessions last active before this hour (time_zone) are replaced",
        check=raises_value_error(lambda v: ResetPolicy(at_hour=v), "0 to 23"),
    )
    reset_policy: str = setting(
        "GATEWAY_RESET_POLICY", text, "",
        "per chat type: <dm|group|channel|thread|*>=<mode>[:<idle minutes>][@<hour>];... (threads only if named)",
    )
    resume_window_seconds: int = setting(
        "GATEWAY_RESUME_WINDOW_SECONDS", whole, 3600,
        "a turn cut short is continued by the next message within this long (0: always)",
    )
    route_max_idle_days: int = setting(
        "GATEWAY_ROUTE_MAX_IDLE_DAYS", whole, 90,
        "routing entries idle this long are pruned (transcripts kept; 0: never)",
        check=at_least(0, "must be 0 (never prune) or more"), wide=True,
    )
    retention_days: int = setting(
        "GATEWAY_SESSIONS_RETENTION_DAYS", whole, 0,
        "transcript rows are deleted this long after they were written, files this long after they were stored, "
        "sessions idle this long with them (0: kept)",
        check=between(0, 3650), wide=True,
    )

    @property
    def lease_ttl_seconds(self) -> int:
        """How long a turn's lease lasts: its time limit, and a margin."""
        return self.turn_timeout_seconds + LEASE_MARGIN_SECONDS

    @property
    def base_reset_policy(self) -> ResetPolicy:
        """The reset policy of reset_mode, reset_idle_minutes and reset_at_hour together."""
        return ResetPolicy(self.reset_mode, self.reset_idle_minutes, self.reset_at_hour)

    def validate(self) -> None:
        try:
            parse_policy_map(self.reset_policy, self.base_reset_policy)
        except ValueError as exc:
            raise Invalid("reset_policy", str(exc)) from None


@dataclass(frozen=True, kw_only=True)
class CronSettings(Section):
    """`cron:` scheduled jobs (deployment-wide)."""

    grace_seconds: int = setting(
        "GATEWAY_CRON_GRACE_SECONDS", whole, 300,
        "a one-shot job found this late still runs; later it is retired with a reason", check=between(0, 86400),
    )
    max_jobs_per_tick: int = setting(
        "GATEWAY_CRON_MAX_JOBS_PER_TICK", whole, 50, "due jobs one tick claims (the rest wait for the next minute)",
        check=between(1, 500),
    )


@dataclass(frozen=True, kw_only=True)
class HooksSettings(Section):
    """`hooks:` in-process hooks and the lifecycle events put on the bus (deployment-wide)."""

    enabled: tuple[str, ...] = setting(
        "GATEWAY_HOOKS", names, (),
        "in-process hooks to run (folders of hermes_gateway/hooks/) besides those their manifest enables",
        check=each(matches(r"[a-z0-9_]{1,40}", "{value!r} is not a hook folder name (a-z, 0-9, _)", "a-z 0-9 _")),
    )
    bus_events: tuple[str, ...] = setting(
        "GATEWAY_BUS_EVENTS", names, (),
        "lifecycle events put on the event bus: names, or prefixes ending in * (each is $1 per million; "
        "default none, local mode every one)",
        check=each(matches(
            r"\*|[a-z_]{1,20}(:[a-z_]{0,40}\*?|\*)",
            "{value!r}: use event names (agent:end) or prefixes (agent:*, *)", "event names or prefixes",
        )),
    )


@dataclass(frozen=True, kw_only=True)
class TurnSettings(Section):
    """`turns:` agent turns: messages during a turn, the tool loop, approvals, the workflow."""

    busy_input_mode: str = setting(
        "GATEWAY_BUSY_INPUT_MODE", text, "queue",
        "a message during a turn: queue (after it) | interrupt (stop it) | steer (into it after a tool call)",
        check=one_of(BUSY_MODES),
    )
    busy_followup: str = setting(
        "GATEWAY_BUSY_FOLLOWUP", text, "each",
        "queued messages: each (one turn per message, in order) | one (one follow-up turn for all)",
        check=one_of(FOLLOWUP_MODES),
    )
    busy_ack: bool = setting(
        "GATEWAY_BUSY_ACK", flag, True, "tell the chat once per turn that its message waits for the running turn",
    )
    max_queued: int = setting(
        "GATEWAY_MAX_QUEUED", whole, 20, "messages one session may queue behind its turn", check=between(1, 100),
    )
    max_tool_iterations: int = setting(
        "GATEWAY_MAX_TOOL_ITERATIONS", whole, 8, "model calls with tools in one turn; then the model must answer",
        check=between(1, 50),
    )
    max_turn_seconds: int = setting(
        "GATEWAY_MAX_TURN_SECONDS", whole, 900, "a turn's tool loop stops offering tools after this long",
        check=between(30, 3600),
    )
    continue_after_seconds: int = setting(
        "GATEWAY_CONTINUE_AFTER_SECONDS", whole, 120, "a tool loop this long into one execution continues in a new one",
        check=between(10, TURN_LIMIT_SECONDS - CONTINUE_TAIL_SECONDS, why="one execution's 300 s"),
    )
    approval_timeout_seconds: int = setting(
        "GATEWAY_APPROVAL_TIMEOUT_SECONDS", whole, 300, "an unanswered tool approval is denied after this long",
        check=between(30, 86400),
    )
    approvers: tuple[str, ...] = setting(
        "GATEWAY_APPROVERS", names, (), "user ids that may answer any approval (besides admins and the user asked)",
    )
    workflow_type: str = setting(
        "GATEWAY_WORKFLOW_TYPE", text, "express",
        "the turn state machine: express (billed per request) | standard (visual history)",
        check=one_of(WORKFLOW_TYPES), wide=True,
    )


@dataclass(frozen=True, kw_only=True)
class MediaSettings(Section):
    """`media:` attachments both ways (BEHAVIOUR §6a): what is fetched, how much, for how long."""

    max_bytes: int = setting(
        "GATEWAY_MEDIA_MAX_BYTES", whole, 20_000_000, "larger attachments are not fetched (the model is told)",
        # the attachments function's 256 MB (resources.py) holds the file and its copies besides the
        # ~65 MB the interpreter holds (bench/cold_start.py); the model is given images up to
        # services/turn/media.MODEL_IMAGE_MAX_BYTES (the agent's 128 MB holds their base64)
        check=between(1024, 40_000_000, why="a function's memory holds the file"),
    )
    kinds: tuple[str, ...] = setting(
        "GATEWAY_MEDIA_KINDS", names, FETCHED_KINDS,
        "attachment kinds fetched for the model: image, audio, voice, document (video, sticker: named only)",
        check=known(MEDIA_KINDS, "media kind"),
    )
    retention_days: int = setting(
        "GATEWAY_MEDIA_RETENTION_DAYS", whole, 30, "fetched media is deleted from the media bucket after this",
        check=between(1, 3650), wide=True,
    )
    max_text_chars: int = setting(
        "GATEWAY_MEDIA_MAX_TEXT_CHARS", whole, 20_000, "a document's text given to the model is cut after this",
        check=between(100, 500_000),
    )
    max_attachments: int = setting(
        "GATEWAY_MEDIA_MAX_ATTACHMENTS", whole, 10,
        "files opened per message, and attached per reply; the rest are named as left out",
        check=between(1, 50),
    )
    max_total_bytes: int = setting(
        "GATEWAY_MEDIA_MAX_TOTAL_BYTES", whole, 50_000_000,
        "the files of one message fetched together at most this; the rest are named as left out",
        check=between(1024, 500_000_000),
    )
    max_pdf_pages: int = setting(
        "GATEWAY_MEDIA_MAX_PDF_PAGES", whole, 50, "a PDF's text is read from at most this many pages",
        check=between(1, 2000),
    )
    pdf_seconds: int = setting(
        "GATEWAY_MEDIA_PDF_SECONDS", whole, 10,
        "CPU seconds a PDF's text may take (a child process, stopped then; what was read is kept)",
        # the PrepareMedia task has 60 s for a message's files (infra/statemachines/turn.asl.json)
        check=between(1, 30, why="the PrepareMedia task's limit holds a message's files"),
    )
    outbound_hosts: tuple[str, ...] = setting(
        "GATEWAY_MEDIA_OUTBOUND_HOSTS", names, (),
        "hosts a reply's MEDIA: URLs may name although no message or tool result of the turn did "
        "(example.com; *.example.com takes its subdomains too)",
    )


@dataclass(frozen=True, kw_only=True)
class SttSettings(Section):
    """`stt:` voice notes and audio transcribed before the turn (OpenAI-compatible transcriptions)."""

    provider: str = setting(
        "GATEWAY_STT_PROVIDER", text, "",
        "openai | none (empty: openai when stt.base_url is set or the model provider is openai)",
        check=optional(one_of(STT_PROVIDERS)),
    )
    model: str = setting("GATEWAY_STT_MODEL", text, "whisper-1", "the transcription model")
    base_url: str = setting(
        "STT_BASE_URL", url, "", "the transcription API's base URL (empty: provider.openai_base_url)",
        check=optional(http_url),
    )
    echo_transcripts: bool = setting(
        "GATEWAY_STT_ECHO_TRANSCRIPTS", flag, True, "show the chat what was heard in a voice note",
    )
    max_seconds: int = setting(
        "GATEWAY_STT_MAX_SECONDS", whole, 600,
        "longer audio (its length read from the file) is not transcribed; nor is audio whose length cannot be read",
        check=between(1, 7200),
    )


@dataclass(frozen=True, kw_only=True)
class TtsSettings(Section):
    """`tts:` answers spoken as voice notes (OpenAI-compatible speech or Amazon Polly; each chat
    chooses with /voice)."""

    provider: str = setting(
        "GATEWAY_TTS_PROVIDER", text, "none",
        "openai (an OpenAI-compatible /audio/speech) | polly (Amazon Polly in the deployment's region, no key) "
        "| none (none: no answer is spoken and /voice says so)",
        check=one_of(TTS_PROVIDERS),
    )
    model: str = setting("GATEWAY_TTS_MODEL", text, "gpt-4o-mini-tts", "the speech model (provider openai)")
    voice: str = setting("GATEWAY_TTS_VOICE", text, "alloy", "the speech model's voice (provider openai)")
    polly_voice: str = setting(
        "GATEWAY_TTS_POLLY_VOICE", text, "Joanna", "Polly's voice id (provider polly; it sets the language)",
    )
    polly_engine: str = setting(
        "GATEWAY_TTS_POLLY_ENGINE", text, "neural",
        "standard | neural | long-form | generative (provider polly; the voice must have it; prices differ)",
        check=one_of(POLLY_ENGINES),
    )
    base_url: str = setting(
        "TTS_BASE_URL", url, "", "the speech API's base URL (empty: provider.openai_base_url)",
        check=optional(http_url),
    )
    max_chars: int = setting(
        "GATEWAY_TTS_MAX_CHARS", whole, 1500,
        "an answer's first characters that are spoken (cut at a sentence; at most 3000 with polly); the whole "
        "answer is sent as text too",
        check=between(100, 4096, why="the speech API takes 4096 characters at most"),
    )

    def validate(self) -> None:
        if self.provider == "polly" and self.max_chars > POLLY_MAX_CHARS:
            raise Invalid("max_chars", f"must be at most {POLLY_MAX_CHARS} with provider polly (its limit a request)")


@dataclass(frozen=True, kw_only=True)
class IngressSettings(Section):
    """`ingress:` the webhook endpoint and its limits (deployment-wide)."""

    max_body_bytes: int = setting(
        "GATEWAY_MAX_BODY_BYTES", whole, 65536, "larger webhook bodies get 413",
        check=between(1024, 200_000, why="the queue message limit"),
    )
    endpoint: str = setting(
        "GATEWAY_WEBHOOK_ENDPOINT", text, "http_api",
        "http_api (API Gateway: a stage throttle, access logs; 1 USD per million requests) | function_url "
        "(the ingress function's own URL: no per-request price); changing it changes the webhook URLs",
        check=one_of(WEBHOOK_ENDPOINTS),
    )


@dataclass(frozen=True, kw_only=True)
class OperationsSettings(Section):
    """`operations:` alarms, the dashboard and tracing (deployment-wide)."""

    alarm_email: str = setting(
        "GATEWAY_ALARM_EMAIL", text, "",
        "e-mail address subscribed to the alarm topic (it must confirm the subscription)",
        check=optional(matches(r"[^@\s]+@[^@\s]+\.[^@\s]+", "must be an e-mail address", "an e-mail address")),
    )
    observability: str = setting(
        "GATEWAY_OBSERVABILITY", text, "minimal",
        "minimal (2 alarms) | standard (alarms per function and queue) | full (+ dashboard, X-Ray); docs/cost.md",
        check=one_of(OBSERVABILITY_TIERS),
    )
    dashboard: bool = setting(
        "GATEWAY_DASHBOARD", flag, False,
        "a CloudWatch dashboard in any tier (full always has one; $3 a month beyond an account's first three)",
    )


@dataclass(frozen=True, kw_only=True)
class PlatformSettings(Section):
    """One platform's settings, the same for every platform: `platforms.<name>.<attribute>` and
    `<NAME>_<VARIABLE>` (TELEGRAM_ALLOWED_USERS); a platform's own settings (its catalog
    `Option`s) are in `options`."""

    name: str = ""
    enabled: bool = setting(
        "ENABLED", flag, False, "accept this platform's webhooks", per_platform=lambda spec: spec.enabled,
    )
    api_base_url: str = setting(
        "API_BASE_URL", url, "", "the platform's API base URL",
        check=optional(http_url), per_platform=lambda spec: spec.api_base_url or "",
    )
    allowed_users: tuple[str, ...] = setting("ALLOWED_USERS", names, (), "user ids allowed on this platform")
    allow_all_users: bool = setting(
        "ALLOW_ALL_USERS", flag, False, "allow every user of this platform",
        per_platform=lambda spec: spec.name == "webchat",  # the local web chat page has no users to allowlist
    )
    allowed_chats: tuple[str, ...] = setting(
        "ALLOWED_CHATS", names, (), "group chat ids whose every member is allowed",
    )
    group_users: Mapping[str, tuple[str, ...]] = setting(
        "GROUP_USERS", group_map, {}, "per group chat id, the sender ids allowed in it",
    )
    bot_policy: str = setting(
        "BOT_POLICY", text, "none", "messages from other bots: none | mentions | all", check=one_of(BOT_POLICIES),
    )
    unauthorized_dm: str = setting(
        "UNAUTHORIZED_DM", text, "", "an unknown user's DM: pair | ignore (empty: by rule)",
        check=one_of(UNAUTHORIZED_DM_MODES, "must be pair, ignore or empty (decided by rule)"),
    )
    admins: tuple[str, ...] = setting("ADMINS", names, (), "user ids that are admins on this platform")
    home_channel: str = setting(
        "HOME_CHANNEL", text, "", "chat_id[:thread_id] a bare platform target sends to, until /sethome",
    )
    reset_policy: str = setting(
        "RESET_POLICY", text, "", "this platform's session reset policy (as sessions.reset_policy)",
    )
    reset_notice: bool = setting(
        "RESET_NOTICE", flag, True, "tell the chat when its session was reset automatically",
    )
    busy_input_mode: str = setting(
        "BUSY_INPUT_MODE", text, "", "this platform's turns.busy_input_mode (empty: the gateway's)",
        check=optional(one_of(BUSY_MODES)),
    )
    limits: str = setting(
        "LIMITS", text, "",
        "this platform's own limits.*, as <name>=<number>;... e.g. messages_per_minute=5;usd_per_day=0.5 "
        "(empty: the gateway's)",
        check=raises_value_error(parse_overrides, "<name>=<number>;... with names " + ", ".join(LIMIT_NAMES)),
    )
    typing_indicator: bool = setting(
        "TYPING_INDICATOR", flag, True, "show that the agent is working while a turn runs (where the platform can)",
    )
    reply_to_mode: str = setting(
        "REPLY_TO_MODE", text, "first", "answers reply to the user's message: off | first (chunk) | all",
        check=one_of(REPLY_TO_MODES),
    )
    streaming: bool = setting(
        "STREAMING", flag, False,
        "post the answer while the model writes it and edit it in place (platforms that can edit a message)",
        per_platform=lambda spec: spec.name in STREAMING_PLATFORMS,
    )
    streaming_edit_interval: float = setting(
        "STREAMING_EDIT_INTERVAL", fraction, 0.0,
        "seconds between a streamed answer's edits (0: 1 in a DM, 3 in a group)",
        check=between(0, 60),
    )
    streaming_first_after: float = setting(
        "STREAMING_FIRST_AFTER", fraction, 1.5,
        "seconds of writing before a streamed answer is first posted (sooner once 200 characters are written)",
        check=between(0, 60),
    )
    options: Mapping[str, Any] = field(default_factory=dict)  # the platform's own (catalog `Option`s)

    def validate(self) -> None:
        if self.name == "email" and self.enabled:
            _check_email(self.options)
# fmt: on


_ADDRESS = re.compile(r"[A-Za-z0-9._%+-]{1,64}@([A-Za-z0-9-]{1,63}\.)+[A-Za-z]{2,63}")
_RULE_SET = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,62}[A-Za-z0-9])?")


def _check_email(options: Mapping[str, Any]) -> None:
    """E-mail needs the address it receives at and answers from, on the domain SES receives for."""
    address, domain = str(options.get("address") or ""), str(options.get("domain") or "")
    if not address:
        raise Invalid("address", "is required when e-mail is enabled (the address the agent receives at)")
    if not _ADDRESS.fullmatch(address) or ".." in address:
        raise Invalid("address", "must be a plain e-mail address (name@example.com)")
    if domain and address.rsplit("@", 1)[1].lower() != domain.lower():
        raise Invalid("address", f"must be an address at {domain} (platforms.email.domain)")
    rule_set = str(options.get("rule_set") or "")
    if rule_set and not _RULE_SET.fullmatch(rule_set):
        raise Invalid("rule_set", "must be an SES rule set name: letters, digits, '.', '_' or '-'")
