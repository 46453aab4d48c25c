"""The agent's Markdown as an e-mail's two parts: plain text and simple HTML.

A small renderer of the Markdown models write (paragraphs, headings, lists, quotes, fenced code,
rules; bold, italic, inline code, links), not a CommonMark implementation. It is safe by
construction: every character of the input is HTML-escaped before any tag is added, the only tags
are the fixed ones below, and a link keeps its target only when it is http, https or mailto (so
neither markup nor a `javascript:` URL the model writes reaches a mail client as anything but
text). The plain part is the Markdown with its marks taken off: it reads as what was meant.
Standard library only.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_FENCE = re.compile(r"^\s*(```|~~~)(.*)$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_RULE = re.compile(r"^\s*(?:-\s*){3,}$|^\s*(?:\*\s*){3,}$|^\s*(?:_\s*){3,}$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s*\d{1,9}[.)]\s+(.*)$")
_QUOTE = re.compile(r"^\s*>\s?(.*)$")
_LISTS = (("quote", _QUOTE), ("bullets", _BULLET), ("numbers", _NUMBERED))

_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\[\]\n]+)\]\(([^()\s]+)\)")
_BARE_URL = re.compile(r"(?<![\w/\"'=])(https?://[^\s<>\"']+[^\s<>\"'.,;:!?)\]])")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])|(?<![\w_])_(?=\S)([^_\n]+?)(?<=\S)_(?![\w_])")
_SAFE_SCHEMES = ("http://", "https://", "mailto:")
_STYLE = "font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; font-size: 15px; line-height: 1.5"


@dataclass(frozen=True)
class _Block:
    kind: str  # paragraph | heading | code | quote | bullets | numbers | rule
    lines: tuple[str, ...]
    level: int = 0  # a heading's


def render(markdown: str) -> tuple[str, str]:
    """(plain text, HTML document) of the Markdown."""
    # (NUL never belongs in a mail, and the inline renderer marks its links with it)
    blocks = list(_blocks(markdown.replace("\r\n", "\n").replace("\0", "")))
    plain = "\n\n".join(_plain_block(b) for b in blocks).strip() + "\n"
    body = "\n".join(_html_block(b) for b in blocks)
    document = (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"></head>\n<body style="{_STYLE}">\n{body}\n</body></html>\n'
    )
    return plain, document


def _blocks(text: str) -> Iterator[_Block]:
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            code: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence.group(1)):
                code.append(lines[i])
                i += 1
            yield _Block("code", tuple(code))
            i += 1
            continue
        if not line.strip():
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            yield _Block("heading", (heading.group(2),), len(heading.group(1)))
            i += 1
            continue
        if _RULE.match(line):
            yield _Block("rule", ())
            i += 1
            continue
        listed = next(((k, p) for k, p in _LISTS if p.match(line)), None)
        if listed is not None:
            items, i = _items(lines, i, *listed)
            yield _Block(listed[0], items)
        else:
            paragraph: list[str] = []
            while i < len(lines) and lines[i].strip() and not _starts_block(lines[i]):
                paragraph.append(lines[i].strip())
                i += 1
            yield _Block("paragraph", tuple(paragraph))


def _items(lines: list[str], i: int, kind: str, pattern: re.Pattern[str]) -> tuple[tuple[str, ...], int]:
    """A quote's lines or a list's items from line `i` on (an indented line continues an item),
    and the line after them."""
    items: list[str] = []
    while i < len(lines) and lines[i].strip():
        found = pattern.match(lines[i])
        if found:
            items.append(found.group(1))
        elif kind != "quote" and items and lines[i].startswith((" ", "\t")):
            items[-1] += " " + lines[i].strip()
        else:
            break
        i += 1
    return tuple(items), i


def _starts_block(line: str) -> bool:
    return any(p.match(line) for p in (_FENCE, _HEADING, _RULE, _BULLET, _NUMBERED, _QUOTE))


def _plain_block(block: _Block) -> str:
    if block.kind == "code":
        return "\n".join(block.lines)
    if block.kind == "rule":
        return "\u2014" * 8
    if block.kind == "bullets":
        return "\n".join(f"- {_plain_inline(item)}" for item in block.lines)
    if block.kind == "numbers":
        return "\n".join(f"{n}. {_plain_inline(item)}" for n, item in enumerate(block.lines, start=1))
    if block.kind == "quote":
        return "\n".join(f"> {_plain_inline(item)}" for item in block.lines)
    return "\n".join(_plain_inline(line) for line in block.lines)


def _html_block(block: _Block) -> str:
    if block.kind == "code":
        return f"<pre><code>{html.escape(chr(10).join(block.lines))}</code></pre>"
    if block.kind == "rule":
        return "<hr>"
    if block.kind == "heading":
        level = min(block.level + 1, 4)  # the message's headings sit below its subject
        return f"<h{level}>{_html_inline(block.lines[0])}</h{level}>"
    if block.kind in ("bullets", "numbers"):
        tag = "ul" if block.kind == "bullets" else "ol"
        return f"<{tag}>" + "".join(f"<li>{_html_inline(item)}</li>" for item in block.lines) + f"</{tag}>"
    inner = "<br>\n".join(_html_inline(line) for line in block.lines)
    return f"<blockquote>{inner}</blockquote>" if block.kind == "quote" else f"<p>{inner}</p>"


def _shielded(text: str, code: Callable[[str], str], rest: Callable[[str], str]) -> str:
    """`rest` applied to the text outside inline code spans, `code` to their contents."""
    out, last = [], 0
    for match in _CODE_SPAN.finditer(text):
        out.append(rest(text[last : match.start()]))
        out.append(code(match.group(1)))
        last = match.end()
    out.append(rest(text[last:]))
    return "".join(out)


def _plain_inline(text: str) -> str:
    def rest(part: str) -> str:
        part = _LINK.sub(lambda m: m.group(1) if m.group(1) == m.group(2) else f"{m.group(1)} ({m.group(2)})", part)
        part = _BOLD.sub(r"\2", part)
        return _ITALIC.sub(lambda m: m.group(1) or m.group(2), part)

    return _shielded(text, lambda code: code, rest)


def _html_inline(text: str) -> str:
    def rest(part: str) -> str:
        links: list[str] = []

        def link(match: re.Match[str]) -> str:
            label, target = match.group(1), match.group(2)
            if target.lower().startswith(_SAFE_SCHEMES):
                links.append(f'<a href="{html.escape(target, quote=True)}">{_emphasis(html.escape(label))}</a>')
            else:
                links.append(_emphasis(html.escape(f"{label} ({target})")))
            return f"\0{len(links) - 1}\0"

        part = _LINK.sub(link, part)
        part = _BARE_URL.sub(_link_bare(links), part)
        part = _emphasis(html.escape(part, quote=True))
        return re.sub("\0(\\d+)\0", lambda m: links[int(m.group(1))], part)

    return _shielded(text, lambda code: f"<code>{html.escape(code, quote=True)}</code>", rest)


def _link_bare(links: list[str]) -> Callable[[re.Match[str]], str]:
    def link(match: re.Match[str]) -> str:
        target = html.escape(match.group(1), quote=True)
        links.append(f'<a href="{target}">{target}</a>')
        return f"\0{len(links) - 1}\0"

    return link


def _emphasis(escaped: str) -> str:
    """Bold and italic on text that is already escaped (the marks themselves are never escaped)."""
    escaped = _BOLD.sub(r"<strong>\2</strong>", escaped)
    return _ITALIC.sub(lambda m: f"<em>{m.group(1) or m.group(2)}</em>", escaped)
