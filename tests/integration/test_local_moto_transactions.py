"""Local mode's item-level rollback of failed transactions behaves as DynamoDB's all-or-nothing."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.integration.conftest import REGION, Aws


def _item(client: Any, table: str, key: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = client.get_item(TableName=table, Key={"pk": {"S": key}, "sk": {"S": "x"}}).get(
        "Item"
    )
    return found


def test_a_failed_transaction_leaves_every_item_as_it_was(aws: Aws) -> None:
    client = boto3.client("dynamodb", region_name=REGION)
    table = aws.bindings.table("directory")
    client.put_item(TableName=table, Item={"pk": {"S": "a"}, "sk": {"S": "x"}, "n": {"N": "1"}})
    client.put_item(TableName=table, Item={"pk": {"S": "c"}, "sk": {"S": "x"}, "n": {"N": "7"}})

    with pytest.raises(ClientError) as refused:
        client.transact_write_items(
            TransactItems=[
                # applied by moto before the last condition fails: each must be undone
                {
                    "Update": {
                        "TableName": table,
                        "Key": {"pk": {"S": "a"}, "sk": {"S": "x"}},
                        "UpdateExpression": "SET n = :two",
                        "ExpressionAttributeValues": {":two": {"N": "2"}},
                    }
                },
                {"Put": {"TableName": table, "Item": {"pk": {"S": "b"}, "sk": {"S": "x"}, "n": {"N": "3"}}}},
                {"Delete": {"TableName": table, "Key": {"pk": {"S": "c"}, "sk": {"S": "x"}}}},
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "Key": {"pk": {"S": "missing"}, "sk": {"S": "x"}},
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )
    assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert _item(client, table, "a") == {"pk": {"S": "a"}, "sk": {"S": "x"}, "n": {"N": "1"}}
    assert _item(client, table, "b") is None
    assert _item(client, table, "c") == {"pk": {"S": "c"}, "sk": {"S": "x"}, "n": {"N": "7"}}


def test_a_transaction_that_holds_is_applied_whole(aws: Aws) -> None:
    client = boto3.client("dynamodb", region_name=REGION)
    table = aws.bindings.table("directory")
    client.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": table, "Item": {"pk": {"S": "a"}, "sk": {"S": "x"}}}},
            {"Put": {"TableName": table, "Item": {"pk": {"S": "b"}, "sk": {"S": "x"}}}},
        ]
    )
    assert _item(client, table, "a") is not None and _item(client, table, "b") is not None
