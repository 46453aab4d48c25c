"""The deployed stack's name and the outputs the operator's tools read back, named once.

The CDK stack (`infra/stack.py`) writes these outputs; the CLI (`hermes_cli.target`) finds a
deployment's tables, queues, state machine, log groups and URLs through them. Changing a key here
changes both sides at once, so they cannot drift. Pure naming beside `resources.py`: no boto3, no CDK.
"""

from __future__ import annotations

SESSION_API_OUTPUT = "SessionApiUrl"  # the session API's endpoint (`hermes-gateway sessions`)
# E-mail (`hermes-gateway email`): the receipt rule set the gateway's rule is in, and its address
EMAIL_RULE_SET_OUTPUT = "EmailRuleSetName"
EMAIL_ADDRESS_OUTPUT = "EmailAddress"


def stack_name(stage: str) -> str:
    return f"HermesGateway-{stage}"


def table_output_key(table: str) -> str:
    """The stack output that carries a table's physical name, e.g. `AccessTableName`."""
    return f"{table.capitalize()}TableName"


def bucket_output_key(bucket: str) -> str:
    """The stack output that carries a bucket's name, e.g. `MediaBucketName`."""
    return f"{bucket.capitalize()}BucketName"


def queue_output_key(queue: str) -> str:
    """The stack output that carries a queue's URL, e.g. `DeadLettersQueueUrl`."""
    return "".join(part.capitalize() for part in queue.split("-")) + "QueueUrl"


def function_output_key(function: str) -> str:
    """The stack output that carries a function's ARN, e.g. `DeliveryFunctionArn`."""
    return "".join(part.capitalize() for part in function.split("_")) + "FunctionArn"


# Queues of the transport before the inbox (their outputs name them on an older stack): an upgrade
# removes them, so `hermes-gateway deploy` checks they are empty first.
LEGACY_QUEUES = ("inbound", "inbound-dlq", "delivery", "delivery-dlq")


def state_machine_output_key(state_machine: str) -> str:
    """The stack output that carries a state machine's ARN, e.g. `TurnStateMachineArn`."""
    return f"{state_machine.capitalize()}StateMachineArn"


def log_group_output_key(function: str) -> str:
    """The stack output that carries a function's log group name, e.g. `SessionApiLogGroupName`
    (CloudFormation ids are alphanumeric: `session_api` would lose its underscore otherwise)."""
    return "".join(part.capitalize() for part in function.split("_")) + "LogGroupName"


def webhook_output_key(platform: str, profile: str | None = None) -> str:
    """The stack output that carries a platform's webhook URL, e.g. `GoogleChatWebhookUrl`; a named
    profile's, e.g. `TelegramWebhookUrlForMyBot` (CloudFormation ids are alphanumeric)."""
    key = "".join(part.capitalize() for part in platform.split("_")) + "WebhookUrl"
    return key + "For" + "".join(part.capitalize() for part in profile.split("_")) if profile else key
