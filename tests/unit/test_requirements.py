"""The pins agree: pyproject.toml's dependencies, requirements/dev.txt (every install: `make install`)
and requirements/layer.txt (what the Lambda layer carries) name one version of each distribution,
and the runtime depends on nothing that only the operator's tools need."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "hermes-serverless-gateway"


def _name(requirement: str) -> str:
    """PEP 503's normalized name, without extras or version: `moto[server]==5` -> `moto`."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\[=<>!~; ]", requirement, maxsplit=1)[0]).lower()


def _pins(path: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        requirement = line.partition("#")[0].strip()
        if requirement:
            assert "==" in requirement, f"{path.name}: {requirement!r} is not pinned exactly"
            pins[_name(requirement)] = requirement.rpartition("==")[2]
    return pins


def _project() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {"dependencies": project["dependencies"], **project["optional-dependencies"]}


def test_every_pin_of_the_layer_is_the_dev_environments() -> None:
    dev, layer = _pins(ROOT / "requirements" / "dev.txt"), _pins(ROOT / "requirements" / "layer.txt")
    assert {name: dev.get(name) for name in layer} == layer
    # The Lambda runtime provides boto3 and botocore; moto is the embedded AWS of local mode only.
    assert not {"boto3", "botocore", "moto", "pyyaml"} & set(layer)


def test_every_pyproject_dependency_is_pinned_as_in_dev() -> None:
    dev = _pins(ROOT / "requirements" / "dev.txt")
    for group, requirements in _project().items():
        for requirement in requirements:
            if _name(requirement) != PROJECT:
                assert requirement.rpartition("==")[2] == dev.get(_name(requirement)), (group, requirement)


def test_moto_is_an_extra_of_local_mode_and_the_tests_not_a_runtime_dependency() -> None:
    groups = {group: {_name(r) for r in requirements} for group, requirements in _project().items()}
    assert "moto" not in groups["dependencies"]
    assert "moto" in groups["local"]
    assert f"{PROJECT}[local]" in _project()["dev"]
