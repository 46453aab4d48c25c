"""How a setting is declared: once, on the dataclass field it fills.

    timeout_seconds: int = setting(
        "GATEWAY_PROVIDER_TIMEOUT_SECONDS", whole, 60, "one model request's time limit",
        check=positive(at_most=80, why="the Respond task's limit"),
    )

says everything about `provider.timeout_seconds`: its place in gateway.yaml (the section and the
attribute), the environment variable that overrides it, how its text is parsed, its default, the
line the reference documentation shows, and the rule its value must keep. A rule that spans
several settings is the section's `validate`, which raises `Invalid` naming the attribute at fault.

This module is the vocabulary (`setting`, the parsers, the checks); `table.py` turns the
declarations into the one table that loading, `to_env`, the shipped file and the docs all read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_gateway.platforms.catalog import PlatformSpec

SETTING_META = "hermes_setting"  # the key of a declaration in a dataclass field's metadata
SECTION_META = "hermes_section"  # a Settings field holding a section of gateway.yaml
PLATFORMS_META = "hermes_platforms"  # the Settings field holding one section per catalog platform


class Invalid(Exception):
    """A value that breaks its rule; `where` is the attribute (or the path) at fault."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(reason)
        self.where, self.reason = where, reason


@dataclass(frozen=True)
class Check:
    """A rule for one value: `find` returns why the value breaks it (None when it keeps it);
    `allowed` is how the reference documentation states the rule."""

    find: Callable[[Any], str | None]
    allowed: str


@dataclass(frozen=True)
class Setting:
    """One setting. Declared with `setting()` on its field; `table.py` fills in its `path`, its
    full `env` name and its `place` (the attributes leading to its value from `Settings`)."""

    env: str  # the environment variable; on a platform's section, the part after `<NAME>_`
    parse: Callable[[Any], Any]
    default: Any
    doc: str
    check: Check | None = None
    wide: bool = False  # set once for the whole deployment: a named profile may not change it
    # A platform's own default (from its catalog entry), where it differs from `default`.
    per_platform: Callable[[PlatformSpec], Any] | None = None
    path: str = ""  # dotted place in gateway.yaml
    place: tuple[str, ...] = ()


def setting(
    env: str,
    parse: Callable[[Any], Any],
    default: Any,
    doc: str,
    *,
    check: Check | None = None,
    wide: bool = False,
    per_platform: Callable[[PlatformSpec], Any] | None = None,
) -> Any:
    """A dataclass field that is a setting (see the module's docstring)."""
    declared = Setting(env, parse, default, doc, check, wide, per_platform)
    if isinstance(default, Mapping):
        return field(default_factory=lambda: dict(default), metadata={SETTING_META: declared})
    return field(default=default, metadata={SETTING_META: declared})


def section(cls: type, *, wide: bool = False) -> Any:
    """A Settings field holding a section of gateway.yaml (its name is the section's key);
    `wide`: every setting in it is deployment-wide."""
    return field(default_factory=cls, metadata={SECTION_META: cls, "wide": wide})


def platform_sections(cls: type) -> Any:
    """The Settings field holding one `cls` per catalog platform, by name (`platforms.<name>.`)."""
    return field(metadata={PLATFORMS_META: cls})


class Section:
    """A section of gateway.yaml as a frozen dataclass whose fields are declared with `setting()`."""

    def validate(self) -> None:
        """The rules that span several of the section's settings (one setting's own is its check).
        Raises `Invalid` with the attribute at fault."""


# --- parsers: a YAML value, or the text of an environment variable, to the setting's value -------


def flag(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def _number(raw: Any, kind: Callable[[str], Any], noun: str) -> Any:
    if isinstance(raw, bool):
        raise ValueError(f"expected {noun}, got {raw!r}")
    try:
        return kind(str(raw).strip())
    except ValueError:
        raise ValueError(f"expected {noun}, got {raw!r}") from None


def whole(raw: Any) -> int:
    return int(_number(raw, int, "a whole number"))


def fraction(raw: Any) -> float:
    """A number such as 0.5 (a share of something)."""
    return float(_number(raw, float, "a number"))


def text(raw: Any) -> str:
    if isinstance(raw, dict | list):
        raise ValueError(f"expected text, got {type(raw).__name__}")
    return "" if raw is None else str(raw).strip()


def url(raw: Any) -> str:
    """Text without a trailing '/': a base URL that paths are appended to."""
    return text(raw).rstrip("/")


def names(raw: Any) -> tuple[str, ...]:
    """A YAML list, or a comma-separated string as environment variables carry it. An entry may
    not hold a comma or white space itself: the environment form could not carry it intact."""
    if raw is None:
        return ()
    if isinstance(raw, list | tuple):
        items = [str(item).strip() for item in raw]
        for item in items:
            if "," in item or any(c.isspace() for c in item):
                raise ValueError(f"list entry {item!r} may not contain a comma or white space")
    else:
        items = [item.strip() for item in str(raw).split(",")]
    return tuple(item for item in items if item)


_GROUP_MAP_RESERVED = re.compile(r"[;=,\s]")


def urls(raw: Any) -> tuple[str, ...]:
    """A list of base URLs (as `names`), each without a trailing '/'."""
    return tuple(u.rstrip("/") for u in names(raw))


def group_map(raw: Any) -> dict[str, tuple[str, ...]]:
    """Group chat id -> the sender ids allowed in it. YAML: a mapping of lists; environment:
    `chatA=user1,user2;chatB=user3`. Ids may not hold `;`, `=`, `,` or white space."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, Mapping):
        pairs = [(str(chat).strip(), names(users)) for chat, users in raw.items()]
    elif isinstance(raw, str):
        pairs = []
        for part in filter(None, (p.strip() for p in raw.split(";"))):
            chat, sep, listed = part.partition("=")
            if not sep:
                raise ValueError(f"expected chat=user1,user2 in {part!r}")
            pairs.append((chat.strip(), names(listed)))
    else:
        raise ValueError(f"expected a mapping of chat id to user ids, got {type(raw).__name__}")
    for chat, members in pairs:
        if not chat or any(_GROUP_MAP_RESERVED.search(x) for x in (chat, *members)):
            raise ValueError(f"chat {chat!r}: ids may not be empty or hold ';', '=', ',' or white space")
    return dict(pairs)


PARSERS_BY_KIND: dict[str, Callable[[Any], Any]] = {
    "str": text,
    "bool": flag,
    "int": whole,
    "list": names,
    "url": url,
}


# --- checks ----------------------------------------------------------------------------------------


def one_of(choices: Iterable[str], reason: str = "") -> Check:
    options = tuple(choices)
    reason = reason or f"must be one of {', '.join(options)}"
    return Check(lambda v: None if v in options else reason, ", ".join(c or "(empty)" for c in options))


def between(low: int, high: int, why: str = "") -> Check:
    reason = f"must be between {low} and {high}" + (f" ({why})" if why else "")
    return Check(lambda v: None if low <= v <= high else reason, f"{low} to {high}")


def positive(*, at_most: int, why: str) -> Check:
    def find(value: int) -> str | None:
        if value <= 0:
            return "must be greater than zero"
        return f"must be at most {at_most} ({why})" if value > at_most else None

    return Check(find, f"1 to {at_most}")


def share(low: float, high: float) -> Check:
    """A fraction strictly above `low` and at most `high`."""
    reason = f"must be above {low} and at most {high}"
    return Check(lambda v: None if low < v <= high else reason, f"above {low}, at most {high}")


def at_least(low: int, reason: str = "") -> Check:
    return Check(lambda v: None if v >= low else reason or f"must be {low} or more", f"{low} or more")


def matches(pattern: str, reason: str, allowed: str) -> Check:
    """Text that matches `pattern` in full; `reason` may name the value as `{value!r}`."""
    compiled = re.compile(pattern)
    return Check(lambda v: None if compiled.fullmatch(v) else reason.format(value=v), allowed)


def each(check: Check) -> Check:
    """Every entry of a list keeps `check`; the first that does not is named."""

    def find(values: tuple[str, ...]) -> str | None:
        return next(filter(None, map(check.find, values)), None)

    return Check(find, f"each: {check.allowed}")


def known(choices: Iterable[str], noun: str) -> Check:
    """A list whose every entry is one of `choices`; all the unknown ones are named."""
    options = tuple(choices)

    def find(values: tuple[str, ...]) -> str | None:
        unknown = [v for v in values if v not in options]
        return f"unknown {noun}(s) {', '.join(unknown)}; known: {', '.join(options)}" if unknown else None

    return Check(find, f"any of {', '.join(options)}")


def optional(check: Check) -> Check:
    """Empty, or keeping `check`."""
    return Check(lambda v: check.find(v) if v else None, f"empty, or {check.allowed}")


def is_http_url(value: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and port_ok and not re.search(r"\s", value)


HTTP_URL_REASON = "must be an http(s) URL with a host and no white space"
http_url = Check(lambda v: None if is_http_url(v) else HTTP_URL_REASON, "an http(s) URL")
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


def is_secure_url(value: str) -> bool:
    """An https URL, or an http one to this machine's loopback (local mode, its tests): a URL the
    gateway sends a credential to never crosses a network in the clear."""
    from urllib.parse import urlsplit

    if not is_http_url(value):
        return False
    parts = urlsplit(value)
    return parts.scheme == "https" or (parts.hostname or "") in LOOPBACK_HOSTS


SECURE_URL_REASON = "must be an https URL (http only to 127.0.0.1, ::1 or localhost, as in local mode)"
secure_url = Check(lambda v: None if is_secure_url(v) else SECURE_URL_REASON, "an https URL (http: loopback only)")
# The rule a platform option's value keeps, by its kind (`platforms.catalog.Option.kind`).
CHECKS_BY_KIND: dict[str, Check] = {"url": optional(secure_url)}


def _time_zone(value: str) -> str | None:
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(value)
    except Exception:  # noqa: BLE001 - any failure means the name is unusable
        return f"unknown time zone {value!r}"
    return None


time_zone = Check(_time_zone, "an IANA time zone name")


def raises_value_error(test: Callable[[Any], object], allowed: str) -> Check:
    """A rule kept by a domain constructor: its ValueError's message is the reason."""

    def find(value: Any) -> str | None:
        try:
            test(value)
        except ValueError as exc:
            return str(exc)
        return None

    return Check(find, allowed)
