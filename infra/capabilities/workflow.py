"""The turn state machine, from the ASL file shared with local mode (`TURN_STATE_MACHINE`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from hermes_gateway.resources import StateMachineSpec
from infra.capabilities.functions import LOG_RETENTION
from infra.nag import acknowledge


def state_machine_name(scope: Construct, spec: StateMachineSpec) -> str:
    """A fixed physical name, so a function the workflow itself invokes (the agent starts
    continuations and queued turns) can be granted it without a reference cycle."""
    return f"{Stack.of(scope).stack_name}-{spec.name}"


def state_machine_arn(scope: Construct, spec: StateMachineSpec) -> str:
    return Stack.of(scope).format_arn(
        service="states",
        resource="stateMachine",
        resource_name=state_machine_name(scope, spec),
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )


class TurnWorkflow(Construct):
    """The state machine; each `${placeholder}` in the definition becomes the named function's ARN.
    `express` (the `turns.workflow_type` setting) picks Express or Standard: the definition uses
    nothing Express lacks, so both run it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: StateMachineSpec,
        definition_file: Path,
        functions: Mapping[str, lambda_.IFunction],
        log_group_name: str,
        express: bool | None = None,
        traced: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        self.spec = spec
        missing = sorted(set(spec.substitutions.values()) - set(functions))
        if missing:
            raise ValueError(f"state machine {spec.name}: substitutions name unknown functions {missing}")
        # Vended-logs prefix: Step Functions log delivery needs it to keep the log resource policy small.
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=log_group_name,
            retention=LOG_RETENTION,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            # Inline (not from_file, which uploads an S3 asset) so the template carries the definition.
            definition_body=sfn.DefinitionBody.from_string(definition_file.read_text(encoding="utf-8")),
            definition_substitutions={
                placeholder: functions[name].function_arn for placeholder, name in spec.substitutions.items()
            },
            state_machine_name=state_machine_name(self, spec),
            state_machine_type=sfn.StateMachineType.EXPRESS
            if (spec.express if express is None else express)
            else sfn.StateMachineType.STANDARD,
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ERROR, include_execution_data=False),
            tracing_enabled=traced,
        )
        # The definition calls the unqualified function ARNs; an explicit statement avoids the `:*`
        # version wildcard that grant_invoke would add.
        for name in sorted(set(spec.substitutions.values())):
            self.state_machine.add_to_role_policy(
                iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[functions[name].function_arn])
            )
        acknowledge(
            self.state_machine,
            "SF1",
            "Logs ERROR only, without execution data: turn inputs carry user messages, and Express "
            "executions bill per log event; the function logs (and X-Ray, above the minimal tier) cover normal runs.",
        )
        if not traced:
            acknowledge(
                self.state_machine,
                "SF2",
                "X-Ray is off in the minimal observability tier: at low traffic it records nearly every "
                "execution (5 USD per million traces); operations.observability: standard turns it on.",
            )
        acknowledge(
            self.state_machine,
            "IAM5[Resource::*]",
            "CloudWatch Logs vended-delivery actions (logs:CreateLogDelivery and related)"
            + (" and X-Ray actions" if traced else "")
            + " do not support resource-level permissions.",
        )
