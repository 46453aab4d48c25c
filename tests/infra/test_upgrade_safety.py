"""An upgrade from the previous release deploys in place, with no table replaced.

CloudFormation updates a DynamoDB table's global secondary indexes one creation or deletion per
update ("Cannot perform more than one GSI creation or deletion in a single update"), and a change
of a table's key schema replaces the table (its data gone). `releases/<commit>.json` holds the
tables of the last release as `table_shapes` reads them from its template (nothing else of the
template: no names, no secrets); this release must differ from it by at most one index per table,
keep every table and every key schema. A change needing more is planned as several releases,
each one index per table, the steps written in docs/operations.md ("Upgrading").

Record a release's shapes with: python -m tests.infra.test_upgrade_safety <template.json> <commit>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.infra.conftest import Synthesized

RELEASES = Path(__file__).parent / "releases"
PREVIOUS = RELEASES / "b05d94a.json"  # main before the lean message path


def table_shapes(resources: dict[str, Any]) -> dict[str, Any]:
    """Each table's key schema, indexes (keys and projection), TTL and stream, by logical id."""
    shapes: dict[str, Any] = {}
    for logical_id, resource in sorted(resources.items()):
        if resource["Type"] != "AWS::DynamoDB::Table":
            continue
        props = resource["Properties"]
        shapes[logical_id] = {
            "keys": props["KeySchema"],
            "indexes": {
                index["IndexName"]: {"keys": index["KeySchema"], "projection": index["Projection"]}
                for index in props.get("GlobalSecondaryIndexes", [])
            },
            "ttl": (props.get("TimeToLiveSpecification") or {}).get("AttributeName"),
            "stream": (props.get("StreamSpecification") or {}).get("StreamViewType"),
        }
    return shapes


def index_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The index creations and deletions taking `before` to `after` (a changed index is both)."""
    changes = [f"delete {name}" for name in before if name not in after]
    changes += [f"create {name}" for name in after if name not in before]
    for name in before.keys() & after.keys():
        if before[name] != after[name]:
            changes += [f"delete {name}", f"create {name}"]
    return changes


def test_every_table_of_the_last_release_is_kept_with_its_key_schema(synthesized: Synthesized) -> None:
    previous = json.loads(PREVIOUS.read_text(encoding="utf-8"))
    now = table_shapes(synthesized.resources)
    assert previous.keys() <= now.keys(), f"tables dropped: {sorted(previous.keys() - now.keys())}"
    for logical_id, shape in previous.items():
        assert now[logical_id]["keys"] == shape["keys"], f"{logical_id}: a key schema change replaces the table"


def test_each_table_changes_at_most_one_index(synthesized: Synthesized) -> None:
    previous = json.loads(PREVIOUS.read_text(encoding="utf-8"))
    now = table_shapes(synthesized.resources)
    for logical_id, shape in previous.items():
        changes = index_changes(shape["indexes"], now[logical_id]["indexes"])
        assert len(changes) <= 1, f"{logical_id}: {changes}: plan them as one index per release"


def test_a_ttl_already_on_is_not_moved(synthesized: Synthesized) -> None:
    # DynamoDB cannot move TTL to another attribute in one update (disable, wait an hour, enable).
    previous = json.loads(PREVIOUS.read_text(encoding="utf-8"))
    now = table_shapes(synthesized.resources)
    for logical_id, shape in previous.items():
        if shape["ttl"] is not None:
            assert now[logical_id]["ttl"] == shape["ttl"], logical_id


def test_the_index_count_is_honest() -> None:
    before = {"a": {"keys": 1}, "b": {"keys": 1}}
    assert index_changes(before, before) == []
    assert index_changes(before, {"a": {"keys": 1}}) == ["delete b"]
    assert index_changes(before, {"a": {"keys": 2}, "b": {"keys": 1}}) == ["delete a", "create a"]
    assert sorted(index_changes(before, {"c": {}})) == ["create c", "delete a", "delete b"]


if __name__ == "__main__":
    template, commit = sys.argv[1], sys.argv[2]
    shapes = table_shapes(json.loads(Path(template).read_text(encoding="utf-8"))["Resources"])
    (RELEASES / f"{commit}.json").write_text(json.dumps(shapes, indent=1, sort_keys=True) + "\n", encoding="utf-8")
