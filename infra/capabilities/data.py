"""DynamoDB tables, one per `TableSpec`: on demand, point-in-time recovery, retained on stack delete,
a stream where the spec asks for one."""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from hermes_gateway.resources import Key, TableSpec

_TYPES = {"S": dynamodb.AttributeType.STRING, "N": dynamodb.AttributeType.NUMBER}
_STREAMS = {"NEW_IMAGE": dynamodb.StreamViewType.NEW_IMAGE}


def _attribute(key: Key) -> dynamodb.Attribute:
    try:
        return dynamodb.Attribute(name=key.name, type=_TYPES[key.type])
    except KeyError:
        raise ValueError(f"key {key.name}: unsupported attribute type {key.type!r}") from None


class DataTables(Construct):
    """The gateway's tables by logical name. Data outlives the stack: every table is RETAIN."""

    def __init__(self, scope: Construct, construct_id: str, *, specs: Iterable[TableSpec]) -> None:
        super().__init__(scope, construct_id)
        self.specs: dict[str, TableSpec] = {}
        self.tables: dict[str, dynamodb.Table] = {}
        for spec in specs:
            table = dynamodb.Table(
                self,
                spec.name,
                partition_key=_attribute(spec.partition),
                sort_key=_attribute(spec.sort) if spec.sort else None,
                billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
                point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                    point_in_time_recovery_enabled=True
                ),
                # AWS owned key: always on, no KMS charges
                encryption=dynamodb.TableEncryption.DEFAULT,
                time_to_live_attribute=spec.ttl_attribute,
                stream=_STREAMS[spec.stream] if spec.stream else None,
                removal_policy=RemovalPolicy.RETAIN,
            )
            for index in spec.indexes:
                table.add_global_secondary_index(
                    index_name=index.name,
                    partition_key=_attribute(index.partition),
                    sort_key=_attribute(index.sort) if index.sort else None,
                    projection_type=dynamodb.ProjectionType(index.projection),
                )
            self.specs[spec.name] = spec
            self.tables[spec.name] = table
