"""Trusted in-process hooks (BEHAVIOUR §8), shipped with the deployment in this folder.

Each hook is a subfolder holding `hook.json` and `handler.py`:

    hook.json   {"events": ["session:start", "command:*"], "enabled": false, "description": "..."}
    handler.py  def handle(event, context): ...

`event` is `{"name", "detail"}` (plus, for `message:pre_route`, `message` and `session_key`);
`context` names the deployment (`stage`, `profile`, `function`, `hook`). A hook runs when its
manifest says `"enabled": true` or its folder is named in the `hooks.enabled` setting. A hook
that fails to load or raises is logged and skipped; it never blocks a message. The folder is part
of the `hermes_gateway` package, so the common layer carries it to every function.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hermes_gateway.domain.events import Hook
from hermes_gateway.observability import logger

HOOKS_DIR = Path(__file__).resolve().parent
_NAME = re.compile(r"^[a-z0-9_]{1,40}$")
_EVENT = re.compile(r"^[a-z_]+(:[a-z0-9_*]+)?\*?$|^\*$")


def load_hooks(enabled: Iterable[str] = (), root: Path = HOOKS_DIR) -> list[Hook]:
    """The hooks to run, in folder-name order. A hook named in `enabled` that cannot be loaded is
    logged as an error (the others still load)."""
    wanted = set(enabled)
    hooks: list[Hook] = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and (p / "hook.json").is_file()):
        try:
            manifest = _manifest(folder)
        except ValueError as exc:
            logger.error("hook not loaded", extra={"hook": folder.name, "reason": str(exc)})
            continue
        if not (manifest.get("enabled") is True or folder.name in wanted):
            continue
        try:
            hooks.append(Hook(folder.name, tuple(manifest["events"]), _handle(folder)))
        except Exception as exc:  # noqa: BLE001 - a broken hook is skipped, never fatal
            logger.error("hook not loaded", extra={"hook": folder.name, "reason": type(exc).__name__})
    missing = wanted - {h.name for h in hooks}
    for name in sorted(missing):
        logger.error("hook not loaded", extra={"hook": name, "reason": "no such hook folder with a valid hook.json"})
    return hooks


def _manifest(folder: Path) -> dict[str, Any]:
    if not _NAME.match(folder.name):
        raise ValueError("a hook folder name is 1-40 of a-z, 0-9, _")
    try:
        manifest = json.loads((folder / "hook.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"hook.json unreadable: {type(exc).__name__}") from None
    events = manifest.get("events") if isinstance(manifest, dict) else None
    if not isinstance(events, list) or not events or not all(isinstance(e, str) and _EVENT.match(e) for e in events):
        raise ValueError("hook.json needs `events`: a list of event names (a trailing * matches a prefix)")
    if not (folder / "handler.py").is_file():
        raise ValueError("handler.py is missing")
    return dict(manifest)


def _handle(folder: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"hermes_gateway.hooks.{folder.name}.handler", folder / "handler.py")
    if spec is None or spec.loader is None:
        raise ImportError(folder.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    handle = getattr(module, "handle", None)
    if not callable(handle):
        raise TypeError("handler.py has no handle(event, context)")
    return handle
