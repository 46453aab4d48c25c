"""`hermes-gateway users`: what the CLI does around the services (tests/e2e/test_local_forget.py
runs the commands against local mode): a stack that names no media bucket is said to leave files
out, and an export writes a stored file only under its own `files/` directory."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from hermes_cli import users
from hermes_gateway.resources import TABLES, Bindings


def test_a_stack_without_the_buckets_output_is_said_to_leave_files_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a stack from before the MediaBucketName output: its tables, no bucket
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")  # (the stores' clients are made, not used)
    monkeypatch.setattr(users, "bindings_for", lambda args: Bindings({t.name: t.name for t in TABLES}, {}, {}))
    stores = users._stores(argparse.Namespace(local=False, stage="prod"))
    assert stores.media is None
    assert "no media bucket (MediaBucketName" in capsys.readouterr().err


def test_an_exported_file_is_written_under_files_only(tmp_path: Path) -> None:
    assert users._file_path(tmp_path, "default/s1/1-0.json") == tmp_path / "files" / "default" / "s1" / "1-0.json"
    for key in ("../escape", "default/../../x", "/etc/passwd", ""):
        assert users._file_path(tmp_path, key) is None
