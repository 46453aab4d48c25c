"""Gateway commands (BEHAVIOUR §9), answered by the router without an agent turn.

Admin and user tiers (§4): admins run every command; other users run `/help`, `/whoami` and
the commands listed in `access.user_commands`. Plain chat is unaffected, and an unknown command
goes to the agent as text. This module holds the two commands every user has; issue #3 adds the
session commands (`/new`, `/undo`, ...), which take their place in `COMMANDS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from hermes_gateway.domain.access import is_admin
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.settings import Settings

ALWAYS_ALLOWED = ("help", "whoami")
# "/name args" or "/name@BotName args" (Telegram addresses commands to a bot in groups)
_COMMAND = re.compile(r"^/([A-Za-z][A-Za-z0-9_]{0,31})(?:@[A-Za-z0-9_]+)?(?:\s+(.*))?$", re.DOTALL)


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
class CommandCall:
    source: SessionSource
    settings: Settings
    args: str
    homes: HomeStore | None = None
    now: float = 0.0


def may_run(name: str, source: SessionSource, settings: Settings) -> bool:
    return name in ALWAYS_ALLOWED or name in settings.access.user_commands or is_admin(source, settings)


def _help(call: CommandCall) -> str:
    lines = ["Commands:"]
    lines += [
        f"/{name} - {summary}" for name, (summary, _) in COMMANDS.items() if may_run(name, call.source, call.settings)
    ]
    lines.append("Anything else goes to the agent.")
    return "\n".join(lines)


def _whoami(call: CommandCall) -> str:
    source = call.source
    who = source.user_name or "you"
    role = "admin" if is_admin(source, call.settings) else "user"
    return f"{who}: user id {source.user_id} on {source.platform}, {role}. Here: {source.description}."


def _sethome(call: CommandCall) -> str:
    source = call.source
    if call.homes is None or not source.chat_id:
        return "This chat cannot be a home channel."
    call.homes.set_home(source.platform, source.chat_id, source.thread_id, source.user_id, call.now)
    where = source.chat_id + (f" (thread {source.thread_id})" if source.thread_id else "")
    return (
        f"Home channel for {source.platform} set to this chat: {where}. The target `{source.platform}` now sends here."
    )


Handler = Callable[[CommandCall], str]
COMMANDS: dict[str, tuple[str, Handler]] = {
    "help": ("what you can ask the gateway itself", _help),
    "whoami": ("who the gateway thinks you are", _whoami),
    "sethome": ("make this chat the platform's home channel (cron results, messages sent to the platform)", _sethome),
}


def answer_command(
    text: str, source: SessionSource, settings: Settings, *, homes: HomeStore | None = None, now: float = 0.0
) -> str | None:
    """The gateway's reply to a command, or None when the text is for the agent."""
    command = parse_command(text)
    if command is None or command.name not in COMMANDS:
        return None
    if not may_run(command.name, source, settings):
        return f"/{command.name} is for admins here."
    _, handler = COMMANDS[command.name]
    return handler(CommandCall(source, settings, command.args, homes, now))
