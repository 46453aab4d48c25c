"""A PDF's text within a budget (BEHAVIOUR §6a): at most so many pages, characters and CPU seconds.

pypdf can spend minutes of CPU on a small hostile PDF (a few KB whose pages all share one huge
content stream), which would time the turn's task out and leave the session stuck. So the text is
read in a child process, this module run as `python -m hermes_gateway.pdf_text`, that limits
itself before it imports pypdf: RLIMIT_CPU (the kernel stops it) and RLIMIT_AS (its memory, beside
the function's own). The parent waits for it at most a wall-clock bound too. A signal timer would
not do: it works in a main thread only, and local mode runs the handlers as threads of one process.

The child writes each page's text as one JSON line as soon as it has it, so what was read before
it was stopped is kept, and says why it stopped early (`pages`, `characters`); a child that was
stopped says nothing, which is `time`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

STARTUP_SECONDS = 5.0  # the child's interpreter and pypdf's import, on top of its CPU seconds
MEMORY_BYTES = 512 * 1024 * 1024  # the child's address space (its resident memory stays well below)


class Unreadable(Exception):
    """The PDF cannot be read at all; the text says why, for the user."""


@dataclass(frozen=True)
class PdfText:
    text: str
    pages_read: int
    pages: int  # the PDF's page count (0: not known)
    stopped: str = ""  # why not all was read: "" | "pages" | "characters" | "time"


def extract(data: bytes, *, max_pages: int, max_chars: int, cpu_seconds: int) -> PdfText:
    """The PDF's text, as much as the budget allows. Raises Unreadable."""
    command = [sys.executable, "-m", "hermes_gateway.pdf_text", str(max_pages), str(max_chars), str(cpu_seconds)]
    # The child finds this package (and pypdf) where this process found them: Lambda's layer is
    # on the parent's path by the runtime's doing, not by an environment variable.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run(  # noqa: S603 - our own module, run by this interpreter; the PDF is its stdin
            command, input=data, capture_output=True, timeout=cpu_seconds + STARTUP_SECONDS, env=env, check=False
        )
        output = done.stdout
    except subprocess.TimeoutExpired as exc:  # stopped by the wall-clock bound (the child is killed)
        output = exc.stdout or b""
    return _parsed(output)


def _parsed(output: bytes) -> PdfText:
    texts: list[str] = []
    pages, stopped = 0, "time"  # a child that did not say it ended was stopped
    for line in output.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if "error" in item:
            raise Unreadable(str(item["error"]))
        if "pages" in item:
            pages = int(item["pages"])
        if "text" in item:
            texts.append(str(item["text"]))
        if "end" in item:
            stopped = str(item["end"])
    text = "\n\n".join(t.strip() for t in texts if t.strip())
    if not text and stopped == "":
        raise Unreadable("the PDF has no text (a scan?)")
    return PdfText(text, len(texts), pages, stopped)


# --- the child ---------------------------------------------------------------------------------


def _limit(cpu_seconds: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _say(item: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(item, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> None:
    max_pages, max_chars, cpu_seconds = (int(a) for a in argv[:3])
    _limit(cpu_seconds)
    import io

    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    data = sys.stdin.buffer.read()
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            _say({"error": "the PDF is encrypted"})
            return
        count = len(reader.pages)
        _say({"pages": count})
        chars = 0
        for number in range(min(count, max_pages)):
            text = reader.pages[number].extract_text() or ""
            _say({"text": text})
            chars += len(text.strip())
            if chars >= max_chars and number + 1 < count:
                _say({"end": "characters"})
                return
        _say({"end": "pages" if count > max_pages else ""})
    except (PyPdfError, ValueError, KeyError, TypeError, RecursionError, MemoryError) as exc:
        _say({"error": f"the PDF could not be read ({type(exc).__name__})"})


if __name__ == "__main__":
    main(sys.argv[1:])
