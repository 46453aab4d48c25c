"""What a new user copies from the README works as written: the commands run as typed from the
checkout (the CLI is in `.venv/bin`), the pairing code it shows is one the bot could send, the
first two commands are still `make run` and `make test`, and the model providers it names are
documented (Amazon Bedrock: model access, region, inference profile ids)."""

from __future__ import annotations

import re
from pathlib import Path

from hermes_gateway.domain.pairing import normalize_code

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CODE = re.compile(r"^[ABCDEFGHJKLMNPQRSTUVWXYZ23456789]{8}$")  # BEHAVIOUR §4's alphabet, as the bot prints it


def shell_lines(text: str) -> list[str]:
    """The lines of the ```sh blocks."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```sh"
            continue
        if inside:
            lines.append(line)
    return lines


def test_the_first_two_commands_are_all_a_new_user_needs() -> None:
    first = shell_lines(README)[:2]
    assert [line.split("#")[0].strip() for line in first] == ["make run", "make test"]


def test_every_cli_command_runs_as_typed_from_the_checkout() -> None:
    # `make install` puts the CLI in .venv/bin, not on the PATH: a bare `hermes-gateway` is not found
    bare = [line for line in shell_lines(README) if line.startswith("hermes-gateway ")]
    assert bare == []
    assert any(line.startswith(".venv/bin/hermes-gateway ") for line in shell_lines(README))


def test_the_pairing_example_is_a_code_the_bot_could_send() -> None:
    (line,) = [line for line in shell_lines(README) if "pairing approve" in line]
    code = line.split("#")[0].split()[-1]
    assert CODE.match(code), code
    assert normalize_code(code) == code


def test_bedrock_is_documented_beyond_its_name() -> None:
    assert "docs/bedrock.md" in README
    guide = (ROOT / "docs" / "bedrock.md").read_text(encoding="utf-8")
    for needed in ("Model access", "inference profile", "`us.`", "`eu.`", "region", "AccessDeniedException"):
        assert needed in guide, needed


def test_the_local_state_file_is_documented() -> None:
    assert "HERMES_LOCAL_STATE" in README and "GATEWAY_PORT" in README
    assert "WEBCHAT_STREAMING" in README
