"""Gateway commands (BEHAVIOUR §9), answered by the router without an agent turn.

Tiers (§4): admins run every command. Everyone runs `/help`, `/whoami`, `/status`, `/usage`,
`/sessions`, `/forget` (their own data, §11) and the commands that change only their own
conversation (`/new`, `/reset`, `/undo`, `/retry`, `/compress`, `/title`, `/resume`), except in a
shared session (a group whose members share one session), where those need an admin: one member
must not rewrite everyone's history. `access.user_commands` opens
any other command to every user. Plain chat is unaffected, and an unknown command goes to the
agent as text.

The commands are one table, `COMMANDS`, at the end of this module. The commands about a running
turn (`/stop`, `/approve`, ...) are answered by `services/turn_commands.py` before the busy check;
the table lists them for /help. A handler answers with text, or a `CommandResult` whose
`resubmit_text` the router then routes as a new user turn (`/retry`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from hermes_gateway.domain.access import is_admin
from hermes_gateway.domain.context import COMPRESS_COMMAND
from hermes_gateway.domain.events import LifecycleEvents
from hermes_gateway.domain.limits import UsageBook
from hermes_gateway.domain.model_policy import ModelPolicy
from hermes_gateway.domain.ports import SessionStores, TurnStarter
from hermes_gateway.domain.privacy import CONFIRMED, ErasureRequest, ErasureRequests, Person, forget_explanation
from hermes_gateway.domain.receipts import ReceiptStore
from hermes_gateway.domain.session_key import is_shared_session, key_namespace
from hermes_gateway.domain.sessions import (
    Fence,
    InvalidSessionRequest,
    SessionEntry,
    SessionInfo,
    SessionNotFound,
    sanitize_model_override,
)
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.voice import VOICE_MODES, mode_of
from hermes_gateway.errors import BadRequest, Conflict, TransientError
from hermes_gateway.observability import hash_id, logger
from hermes_gateway.platforms.catalog import VOICE_PLATFORMS
from hermes_gateway.services import lifecycle
from hermes_gateway.services.limits import usage_report
from hermes_gateway.settings import Settings

# "/name args" or "/name@BotName args" (Telegram addresses commands to a bot in groups)
_COMMAND = re.compile(r"^/([A-Za-z][A-Za-z0-9_]{0,31})(?:@[A-Za-z0-9_]+)?(?:\s+(.*))?$", re.DOTALL)
MAX_UNDO = 50
KNOWN_PROVIDERS = ("echo", "openai", "bedrock")
BUSY_REPLY = "A reply is being written in this session. Wait for it (or /stop it) and try again."
CHANGED_REPLY = "The session changed just now. Try again."


@dataclass(frozen=True)
class Command:
    name: str
    args: str


def parse_command(text: str) -> Command | None:
    match = _COMMAND.match(text.strip())
    return Command(match.group(1).lower(), (match.group(2) or "").strip()) if match else None


class HomeStore(Protocol):
    def set_home(self, platform: str, chat_id: str, thread_id: str | None, set_by: str | None, now: float) -> None: ...


@dataclass(frozen=True)
class CommandContext:
    """What a command may read and change: the chat's source and key, the session store, and now.
    Built by the router for every message; the route is read only once a command is recognised."""

    source: SessionSource
    settings: Settings
    now: float
    session_key: str | None = None
    stores: SessionStores | None = None
    homes: HomeStore | None = None
    events: LifecycleEvents | None = None
    # With both, a command that changes the session runs once per inbound event: a redelivered
    # message (the queue may hand it over again) gets the first answer back (`domain.receipts`).
    receipts: ReceiptStore | None = None
    event_id: str | None = None
    # Starts the memory flush of a session /new or /reset replaced (BEHAVIOUR §3).
    starter: TurnStarter | None = None
    # The user's usage across their sessions, for /usage (BEHAVIOUR §11; None: this chat's only).
    usage: UsageBook | None = None
    # /forget's requests (BEHAVIOUR §11), and where the chat's answers go (the erasure's notice too)
    erasures: ErasureRequests | None = None
    reply_to: dict[str, Any] | None = None


@dataclass(frozen=True)
class CommandResult:
    """The gateway's answer. `resubmit_text`: route this text as a new user turn after replying,
    with `resubmit_attachments` (the files of the message /retry repeats, as JSON)."""

    reply: str
    resubmit_text: str | None = None
    resubmit_attachments: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class CommandCall:
    context: CommandContext
    args: str
    route: SessionEntry | None  # the chat's routing entry as read before the command (None: no session yet)

    @property
    def source(self) -> SessionSource:
        return self.context.source

    @property
    def settings(self) -> Settings:
        return self.context.settings

    @property
    def now(self) -> float:
        return self.context.now

    @property
    def homes(self) -> HomeStore | None:
        return self.context.homes


Handler = Callable[[CommandCall], str | CommandResult]


@dataclass(frozen=True)
class CommandSpec:
    """A command: its summary for /help, its handler (None: answered by the running turn's
    commands in services/turn_commands.py), who may run it. `everyone`: every user may;
    `own_session`: it changes the chat's session, so in a shared session it needs an admin."""

    name: str
    summary: str
    handler: Handler | None = None
    everyone: bool = False
    own_session: bool = False


ONCE_ONLY = frozenset({"model"})  # changes the session too, without being every user's to run
REPEATABLE = frozenset({"voice"})  # changes the chat, but running it twice changes nothing more: no receipt


def may_run(name: str, source: SessionSource, settings: Settings) -> bool:
    if is_admin(source, settings) or name in settings.access.user_commands:
        return True
    spec = COMMANDS.get(name)
    if spec is None or spec.handler is None or not spec.everyone:
        return False  # the running turn's commands check who may use them themselves
    return not spec.own_session or not is_shared_session(
        source,
        group_sessions_per_user=settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=settings.sessions.thread_sessions_per_user,
    )


def answer_command(text: str, context: CommandContext) -> CommandResult | None:
    """The gateway's answer to a command, or None when the text is for the agent."""
    command = parse_command(text)
    spec = COMMANDS.get(command.name) if command is not None else None
    if command is None or spec is None or spec.handler is None:
        return None
    if not may_run(command.name, context.source, context.settings):
        return CommandResult(f"/{command.name} is for admins here.")
    claim = _claim(command, context)
    if isinstance(claim, CommandResult):
        return claim  # the first answer to this very message
    receipts = context.receipts if claim is not None else None
    stores, key = context.stores, context.session_key
    route = stores.routes.get(key) if stores is not None and key is not None else None
    try:
        answer = spec.handler(CommandCall(context, command.args, route))
    except BaseException:
        if receipts is not None and claim is not None:
            receipts.abandon(*claim)
        raise
    result = answer if isinstance(answer, CommandResult) else CommandResult(answer)
    if receipts is not None and claim is not None:
        receipt: dict[str, Any] = {"reply": result.reply, "resubmit_text": result.resubmit_text}
        if result.resubmit_attachments:
            receipt["resubmit_attachments"] = list(result.resubmit_attachments)
        receipts.complete(*claim, receipt, context.now)
    if context.events is not None:
        context.events.emit(
            f"command:{command.name}",
            {
                "platform": context.source.platform,
                "user": hash_id(context.source.user_id),
                "session": hash_id(route.session_id if route else None),
                "resubmit": result.resubmit_text is not None,
            },
        )
    logger.info("gateway command", extra={"command": command.name})
    return result


# -- once per message ------------------------------------------------------------------------


def _claim(command: Command, context: CommandContext) -> tuple[str, str] | CommandResult | None:
    """Claim the message for a command that changes the session: (receipt key, claim token), or
    the stored answer of an earlier run, or None when no receipts are kept (or it only reads)."""
    spec = COMMANDS.get(command.name)
    changes = (spec is not None and spec.own_session) or command.name in ONCE_ONLY
    changes = changes and command.name not in REPEATABLE
    if not changes or context.receipts is None or not context.event_id:
        return None
    key = f"command#{context.event_id}"
    fingerprint = hashlib.sha256(f"{command.name} {command.args}".encode()).hexdigest()
    claim = context.receipts.claim(key, fingerprint, context.now)
    if claim.status == "done" and claim.receipt is not None:
        files = claim.receipt.get("resubmit_attachments") or ()
        return CommandResult(str(claim.receipt["reply"]), claim.receipt.get("resubmit_text"), tuple(files))
    if claim.status == "mismatch":
        return None  # not a redelivery (an event id reused with other text): run it as it is
    if claim.status != "claimed" or claim.token is None:
        # Another delivery of this message is running it (or died doing so): retry the message later.
        raise TransientError("the same command is being handled right now")
    return key, claim.token


# -- helpers ---------------------------------------------------------------------------------


def _store(call: CommandCall) -> tuple[SessionStores, str]:
    stores, key = call.context.stores, call.context.session_key
    if stores is None or key is None:
        raise RuntimeError("session commands need the session stores and the chat's key")
    return stores, key


def _full_fence(route: SessionEntry) -> Fence:
    return Fence(route.revision, route.execution_generation)


def _current_route(call: CommandCall) -> SessionEntry:
    """The chat's route, creating its session first when it has none (`/title` before any chat)."""
    if call.route is not None:
        return call.route
    store, key = _store(call)
    return store.routes.open(call.source, key, call.now, touch_activity=False)


def _label(info: SessionInfo | None, session_id: str) -> str:
    title = info.title if info is not None else None
    return f'"{title}" ({session_id})' if title else session_id


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M UTC")


# -- commands --------------------------------------------------------------------------------


def _help(call: CommandCall) -> str:
    lines = ["Commands:"]
    lines += [
        f"/{spec.name} - {spec.summary}"
        for spec in COMMANDS.values()
        if spec.handler is None or may_run(spec.name, call.source, call.settings)
    ]
    lines.append("Anything else goes to the agent.")
    return "\n".join(lines)


def _whoami(call: CommandCall) -> str:
    source = call.source
    who = source.user_name or "you"
    role = "admin" if is_admin(source, call.settings) else "user"
    bot = f" (profile {call.settings.served_profile})" if call.settings.served_profile else ""
    return f"{who}: user id {source.user_id} on {source.platform}{bot}, {role}. Here: {source.description}."


def _usage(call: CommandCall) -> str:
    context = call.context
    return usage_report(call.source, context.session_key, call.route, call.settings, context.usage, call.now)


def _sethome(call: CommandCall) -> str:
    source = call.source
    if call.homes is None or not source.chat_id:
        return "This chat cannot be a home channel."
    call.homes.set_home(source.platform, source.chat_id, source.thread_id, source.user_id, call.now)
    where = source.chat_id + (f" (thread {source.thread_id})" if source.thread_id else "")
    return (
        f"Home channel for {source.platform} set to this chat: {where}. The target `{source.platform}` now sends here."
    )


def _fresh_session(call: CommandCall) -> SessionEntry:
    """/new and /reset: the chat's key gets a new session; the old one ends (reason `forced`)."""
    store, key = _store(call)
    entry = store.routes.open(call.source, key, call.now, force_new=True)
    if call.context.starter is not None:
        lifecycle.flush_replaced(call.context.starter, entry, call.source, call.now)
    events = call.context.events
    if events is not None:
        detail = {"session": hash_id(entry.session_id), "key": hash_id(key), "reason": "forced"}
        if call.route is not None:
            previous = {**detail, "session": hash_id(call.route.session_id)}
            events.emit("session:end", previous)
            events.emit("session:reset", {**detail, "previous": hash_id(call.route.session_id)})
        events.emit("session:start", detail)
    return entry


def _new(call: CommandCall) -> str:
    store, _ = _store(call)
    title = call.args.strip() or None
    entry = _fresh_session(call)
    reply = f"New session started ({entry.session_id})."
    if title:
        try:
            store.edits.rename(entry.session_id, title, fence=Fence(entry.revision), now=call.now)
        except InvalidSessionRequest as exc:
            return f"{reply} Title not set: {exc}."
        except Conflict:
            return f"{reply} Title not set: another session is already called that."
        reply = f'New session "{title}" started ({entry.session_id}).'
    return reply


def _reset(call: CommandCall) -> str:
    entry = _fresh_session(call)
    return f"Session reset. Starting fresh ({entry.session_id})."


def _undo(call: CommandCall) -> str:
    store, _ = _store(call)
    arg = call.args.strip() or "1"
    if not arg.isdigit() or not 1 <= int(arg) <= MAX_UNDO:
        return f"Usage: /undo [n], n from 1 to {MAX_UNDO} (turns to take back)."
    route = call.route
    if route is None:
        return "Nothing to undo."
    if route.lease_held(call.now):
        return BUSY_REPLY
    try:
        result = store.edits.undo(route.session_id, int(arg), fence=_full_fence(route), now=call.now)
    except Conflict:
        return CHANGED_REPLY
    if result.removed == 0:
        return "Nothing to undo."
    return (
        f"Undone: {result.removed} message(s) hidden (kept, not deleted). Last message kept: #{result.rewound_to_seq}."
    )


def _retry(call: CommandCall) -> str | CommandResult:
    store, _ = _store(call)
    route = call.route
    if route is None:
        return "Nothing to retry."
    if route.lease_held(call.now):
        return BUSY_REPLY
    try:
        result = store.edits.retry(route.session_id, fence=_full_fence(route), now=call.now)
    except Conflict:
        return CHANGED_REPLY
    if result.removed == 0 or not result.user_text:
        return "Nothing to retry."
    files = tuple(a.to_dict() for a in result.user_attachments)
    return CommandResult("Retrying your last message.", resubmit_text=result.user_text, resubmit_attachments=files)


def _compress(call: CommandCall) -> str | CommandResult:
    """BEHAVIOUR §10: a turn of its own compresses the session (the model writes the summary)."""
    route = call.route
    if route is None:
        return "Nothing to compress yet."
    if route.lease_held(call.now):
        return BUSY_REPLY
    return CommandResult("Compressing this session...", resubmit_text=COMPRESS_COMMAND)


def _status(call: CommandCall) -> str:
    store, _ = _store(call)
    route = call.route
    if route is None:
        return "No session yet: say something to start one."
    info = store.catalogue.get_session(route.session_id)
    provider = call.settings.provider
    override = route.model_override
    model = (
        f"{override.provider or provider.name}:{override.model} (this session)"
        if override
        else f"{provider.name}:{provider.model or 'default'}"
    )
    state = "busy (a reply is being written)" if route.lease_held(call.now) else "idle"
    lines = [f"Session {_label(info, route.session_id)}"]
    if info is not None:
        active = len(store.transcript.rows(route.session_id, info.hidden))
        hidden = info.message_count - active
        lines.append(
            f"Started {_when(info.started_at)}; {active} messages" + (f" ({hidden} undone)" if hidden > 0 else "")
        )
        lines.append(
            f"Tokens: {info.total_tokens} (in {info.input_tokens}, out {info.output_tokens}, "
            f"cache {info.cache_read_tokens}/{info.cache_write_tokens})"
        )
    lines.append(f"Model: {model}")
    if call.settings.served_profile:
        lines.append(f"Profile: {call.settings.served_profile}")
    lines.append(f"State: {state}" + (", resuming an interrupted turn" if route.resume_pending else ""))
    return "\n".join(lines)


def _model(call: CommandCall) -> str:
    store, key = _store(call)
    arg = call.args.strip()
    route = call.route
    if not arg:
        current = route.model_override if route else None
        default = f"{call.settings.provider.name}:{call.settings.provider.model or 'default'}"
        if current is None:
            return (
                f"Model: {default}. Change it for this session with /model provider:model (/model default undoes it)."
            )
        name = f"{current.provider or call.settings.provider.name}:{current.model}"
        return f"Model: {name} (this session; default {default})."
    route = _current_route(call)
    if route.lease_held(call.now):
        return BUSY_REPLY
    if arg.lower() == "default":
        override = None
    else:
        provider, sep, model = arg.partition(":")
        raw = {"model": model, "provider": provider} if sep and provider in KNOWN_PROVIDERS else {"model": arg}
        try:
            # The profile's own settings: a named profile may pick its own Bedrock model only
            override = ModelPolicy.of(call.settings).check(sanitize_model_override(raw))
        except InvalidSessionRequest as exc:
            return f"Model not changed: {exc}."
    try:
        store.edits.set_model_override(key, override, fence=_full_fence(route), now=call.now)
    except Conflict:
        return CHANGED_REPLY
    if override is None:
        return "This session uses the default model again."
    return f"This session now uses {override.provider or call.settings.provider.name}:{override.model}."


def _title(call: CommandCall) -> str:
    store, _ = _store(call)
    title = call.args.strip()
    if not title:
        if call.route is None:
            return "No session yet. Name it with /title <name>."
        info = store.catalogue.get_session(call.route.session_id)
        current = info.title if info else None
        return f'This session is "{current}".' if current else "This session has no title. Set one with /title <name>."
    route = _current_route(call)
    taken = store.catalogue.find_session_by_title(key_namespace(call.settings.profile), title)
    if taken is not None and taken.session_id != route.session_id:
        return f'Another session is already called "{title}". Pick another title.'
    try:
        store.edits.rename(route.session_id, title, fence=Fence(route.revision), now=call.now)
    except InvalidSessionRequest as exc:
        return f"Title not set: {exc}."
    except Conflict:
        return CHANGED_REPLY
    return f'Session titled "{title}".'


def _chat_sessions(call: CommandCall, key: str, limit: int = 10) -> list[SessionInfo]:
    """This chat's sessions, newest first (another chat's sessions are not shown or resumed here)."""
    store, _ = _store(call)
    found = store.catalogue.list_sessions(key_namespace(call.settings.profile), limit=100)
    return [info for info in found if info.session_key == key][:limit]


def _sessions(call: CommandCall) -> str:
    _, key = _store(call)
    found = _chat_sessions(call, key)
    if not found:
        return "No sessions in this chat yet."
    current = call.route.session_id if call.route else None
    lines = ["Sessions in this chat (newest first):"]
    for info in found:
        mark = " <- current" if info.session_id == current else ""
        ended = f", ended ({info.end_reason})" if info.ended_at else ""
        lines.append(f"- {_label(info, info.session_id)}: {info.message_count} messages{ended}{mark}")
    lines.append("Switch with /resume <title or id>.")
    return "\n".join(lines)


def _resume(call: CommandCall) -> str:
    store, key = _store(call)
    name = call.args.strip()
    if not name:
        return _sessions(call)
    target = store.catalogue.find_session_by_title(key_namespace(call.settings.profile), name)
    if target is None:
        target = next((info for info in _chat_sessions(call, key, limit=100) if info.session_id == name), None)
    if target is None or target.session_key != key:
        return f'No session called "{name}" in this chat. /sessions lists them.'
    route = _current_route(call)
    if route.session_id == target.session_id:
        return f"Already in {_label(target, target.session_id)}."
    if route.lease_held(call.now):
        return BUSY_REPLY
    try:
        store.edits.switch_session(key, target.session_id, fence=_full_fence(route), now=call.now)
    except Conflict:
        return CHANGED_REPLY
    except (SessionNotFound, InvalidSessionRequest):
        return f"{_label(target, target.session_id)} cannot be resumed."
    return f"Resumed {_label(target, target.session_id)}: {target.message_count} messages."


FORGET_USAGE = "Usage: /forget, then /forget confirm to delete what I hold about you (or /forget cancel)."


def _forget(call: CommandCall) -> str:
    """BEHAVIOUR §11: the sender's data in every profile, deleted after a confirmation; the
    erasure itself runs in the every-minute tick, which says here when it is done."""
    requests = call.context.erasures
    if requests is None:
        return "Forgetting is not available here."
    try:
        person = Person.of(call.source)
    except BadRequest:
        return "I cannot tell who sent this, so there is nothing to forget."
    action = call.args.strip().lower()
    if action == "confirm":
        if requests.confirm(person, call.now) is not None:
            logger.info("erasure confirmed", extra={"platform": person.platform, "user": hash_id(person.user_id)})
            return "Deleting your data now. I will tell you here when it is done (usually within a few minutes)."
        current = requests.get(person)
        if current is not None and current.state == CONFIRMED:
            return "Your data is being deleted. I will tell you here when it is done."
        return "Nothing to confirm: send /forget first (it waits 5 minutes for /forget confirm)."
    if action == "cancel":
        return "Dropped: nothing will be deleted." if requests.cancel(person) else "There was no /forget to drop."
    if action:
        return FORGET_USAGE
    source = call.source
    dm_chat = source.chat_id if source.chat_type == "dm" else None
    asked = requests.ask(ErasureRequest.ask(person, call.now, call.context.reply_to, dm_chat))
    if asked.state == CONFIRMED:
        return "Your data is being deleted. I will tell you here when it is done."
    return forget_explanation(person, external_memory=call.settings.memory.external == "honcho")


_VOICE_SAYS = {
    "on": "Voice replies on: every answer here comes as a voice note too.",
    "off": "Voice replies off: answers here are text only.",
    "auto": "Voice replies on auto: a voice note is answered with a voice note.",
}


def _voice(call: CommandCall) -> str:
    """/voice on | off | auto (domain/voice.py): kept on the chat's route, one write when it runs."""
    store, key = _store(call)
    arg = call.args.strip().lower()
    if arg and arg not in VOICE_MODES:
        return "Usage: /voice on | off | auto (auto: a voice note is answered with a voice note)."
    if call.source.platform not in VOICE_PLATFORMS:
        return f"Answers on {call.source.platform} stay text: it has no voice notes the gateway can send."
    caveat = (
        "" if call.settings.tts.provider != "none" else " (Speech is not set up on this gateway yet: tts.provider.)"
    )
    if not arg:
        return _VOICE_SAYS[mode_of(call.route.voice if call.route else None)] + caveat
    _current_route(call)  # (a chat's first message may be /voice: its route is made first)
    store.control.set_voice(key, arg)
    return _VOICE_SAYS[arg] + caveat


COMMANDS: Mapping[str, CommandSpec] = {
    spec.name: spec
    for spec in (
        CommandSpec("help", "what you can ask the gateway itself", _help, everyone=True),
        CommandSpec("whoami", "who the gateway thinks you are", _whoami, everyone=True),
        CommandSpec("status", "this session: id, title, messages, tokens, model, busy or idle", _status, everyone=True),
        CommandSpec(
            "usage",
            "your messages, tokens and estimated cost today and this month, and your limits",
            _usage,
            everyone=True,
        ),
        CommandSpec("new", "start a new session (/new [title])", _new, everyone=True, own_session=True),
        CommandSpec("reset", "start this chat over with a new session", _reset, everyone=True, own_session=True),
        CommandSpec("undo", "take back the last turn (/undo [n] for n turns)", _undo, everyone=True, own_session=True),
        CommandSpec("retry", "answer your last message again", _retry, everyone=True, own_session=True),
        CommandSpec(
            "compress",
            "summarize the older part of this session and go on from the summary",
            _compress,
            everyone=True,
            own_session=True,
        ),
        CommandSpec(
            "title", "show or set this session's title (/title [name])", _title, everyone=True, own_session=True
        ),
        CommandSpec(
            "resume",
            "go back to an earlier session of this chat (/resume <title or id>)",
            _resume,
            everyone=True,
            own_session=True,
        ),
        CommandSpec("sessions", "this chat's sessions", _sessions, everyone=True),
        CommandSpec(
            "forget", "delete what this gateway holds about you (/forget, then /forget confirm)", _forget, everyone=True
        ),
        CommandSpec(
            "voice", "answers as voice notes too: /voice on | off | auto", _voice, everyone=True, own_session=True
        ),
        CommandSpec("model", "show or change this session's model (/model [provider:model], /model default)", _model),
        CommandSpec(
            "sethome",
            "make this chat the platform's home channel (cron results, messages sent to the platform)",
            _sethome,
        ),
        # Answered while a turn runs (services/turn_commands.py), which checks who may.
        CommandSpec("stop", "stop the running turn at its next safe point", everyone=True),
        CommandSpec("approve", "let the waiting tool call run (/approve session, /approve always)", everyone=True),
        CommandSpec("deny", "refuse the waiting tool call", everyone=True),
        CommandSpec("yolo", "turn tool approvals off or back on for this session", everyone=True),
        CommandSpec("queue", "queue a message for after the running turn (/queue <text>)", everyone=True),
    )
}
