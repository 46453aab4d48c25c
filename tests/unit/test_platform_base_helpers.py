"""The payload helpers every platform module shares (platforms/base.py)."""

from __future__ import annotations

import pytest

from hermes_gateway.errors import BadRequest
from hermes_gateway.platforms.base import is_int, object_field, optional_str


def test_an_object_field_is_the_object_or_empty_when_absent() -> None:
    assert object_field({"chat": {"id": 1}}, "chat", "telegram message") == {"id": 1}
    assert object_field({}, "chat", "telegram message") == {}
    assert object_field({"chat": None}, "chat", "telegram message") == {}


@pytest.mark.parametrize("payload", [{}, {"chat": None}, {"chat": []}, {"chat": "x"}])
def test_a_required_object_field_must_be_an_object(payload: dict[str, object]) -> None:
    with pytest.raises(BadRequest, match="telegram message field 'chat' is not an object"):
        object_field(payload, "chat", "telegram message", required=True)


def test_an_optional_object_field_of_another_type_is_malformed() -> None:
    with pytest.raises(BadRequest, match="discord interaction field 'member' is not an object"):
        object_field({"member": [1]}, "member", "discord interaction")


def test_is_int_refuses_booleans_and_other_numbers() -> None:
    assert [is_int(v) for v in (0, 7, -1, True, False, 1.0, "1", None)] == [True] * 3 + [False] * 5


def test_optional_str_is_a_non_empty_string_or_none() -> None:
    assert [optional_str({"k": v}, "k") for v in ("a", "", 1, None)] == ["a", None, None, None]
