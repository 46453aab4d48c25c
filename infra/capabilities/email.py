"""E-mail through Amazon SES (docs/platforms/email.md), built when `platforms.email.enabled`.

Receiving: a receipt rule for the configured address stores each message in the media bucket
under `resources.MAIL.prefix` (SES may write only there, for this rule of this account: the
bucket policy's `aws:SourceAccount` and `aws:SourceArn`), then invokes the ingress function
asynchronously (the function's permission has the same two conditions), so Lambda's retries and
the dead letters keep every message. The rule joins the rule set `platforms.email.rule_set`
names (an account has one active rule set per region, and the stack never changes which one is
active), or a rule set of the stack's own that `hermes-gateway email activate` activates, asking
first. SES receives mail only in some regions: a region known at synth outside them stops the
synth, and the template refuses any other region on deploy.

Sending: the agent and delivery functions may send with SES only from the configured address
(`ses:FromAddress`), through the stack's configuration set, whose bounces, complaints and
rejections go to the account's default EventBridge bus (free for an AWS service's events) and,
by a rule, to the ingress function, which marks the sent chunk's outbox row failed.

The domain's identity (its verification, DKIM and MX records) is the operator's: `make deploy`
reports its status, the guide says how to set it up.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Aws, CfnOutput, CfnRule, CfnRuleAssertion, Duration, Fn, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ses as ses
from constructs import Construct

from hermes_gateway.domain.retention import capped_days
from hermes_gateway.errors import ConfigError
from hermes_gateway.outputs import EMAIL_ADDRESS_OUTPUT, EMAIL_RULE_SET_OUTPUT
from hermes_gateway.platforms.email import domain_of
from hermes_gateway.resources import MAIL, MEDIA
from hermes_gateway.settings import Settings
from infra.capabilities.functions import GatewayFunction
from infra.nag import acknowledge, arn_finding

FEEDBACK_EVENTS = (ses.EmailSendingEvent.BOUNCE, ses.EmailSendingEvent.COMPLAINT, ses.EmailSendingEvent.REJECT)
FEEDBACK_TYPES = ("Bounce", "Complaint", "Reject")  # the events' `eventType` (services.mail_ingress)
SENDERS = ("agent", "delivery")  # the functions that send answers: the turn's Respond task, the delivery


def check_receiving_region(region: str | None) -> None:
    """SES receives e-mail only in MAIL.receiving_regions; None: not known at synth (the template's
    rule checks it on deploy)."""
    if region and region not in MAIL.receiving_regions:
        raise ConfigError(
            f"platforms.email: Amazon SES does not receive e-mail in {region}; deploy to one of "
            f"{', '.join(sorted(MAIL.receiving_regions))}"
        )


class MailReceiving(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        bucket: s3.Bucket,
        functions: Mapping[str, GatewayFunction],
        deploy_region: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        check_receiving_region(deploy_region)
        options = settings.platforms["email"].options
        address, domain = str(options["address"]).lower(), domain_of(options)
        stack = Stack.of(self)
        name = MAIL.name(settings.stage)
        rule_set_name = str(options["rule_set"] or "") or name
        rule_arn = stack.format_arn(
            service="ses", resource="receipt-rule-set", resource_name=f"{rule_set_name}:receipt-rule/{name}"
        )
        ingress = functions["ingress"]
        conditions = {"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID, "aws:SourceArn": rule_arn}}

        # a stored mail is a user's message: no longer than the bucket's files (domain/retention.py)
        self._receive_into(
            bucket, capped_days(settings.media.retention_days, settings.sessions.retention_days), conditions
        )
        ingress.function.add_permission(
            "SesReceipt",
            principal=iam.ServicePrincipal("ses.amazonaws.com"),
            action="lambda:InvokeFunction",
            source_account=Aws.ACCOUNT_ID,
            source_arn=rule_arn,
        )
        rule = ses.CfnReceiptRule(
            self,
            "Rule",
            rule_set_name=rule_set_name,
            rule=ses.CfnReceiptRule.RuleProperty(
                name=name,
                enabled=True,
                recipients=[address],
                scan_enabled=True,  # the spam and virus verdicts ingress refuses on
                tls_policy="Optional",
                actions=[
                    ses.CfnReceiptRule.ActionProperty(
                        s3_action=ses.CfnReceiptRule.S3ActionProperty(
                            bucket_name=bucket.bucket_name, object_key_prefix=MAIL.prefix
                        )
                    ),
                    ses.CfnReceiptRule.ActionProperty(
                        lambda_action=ses.CfnReceiptRule.LambdaActionProperty(
                            function_arn=ingress.function.function_arn, invocation_type="Event"
                        )
                    ),
                ],
            ),
        )
        # SES checks on creation that it may write to the bucket and invoke the function.
        assert bucket.policy is not None
        rule.node.add_dependency(bucket.policy)
        rule.node.add_dependency(ingress.function.permissions_node.find_child("SesReceipt"))
        if not options["rule_set"]:
            rule_set = ses.CfnReceiptRuleSet(self, "RuleSet", rule_set_name=name)
            rule.node.add_dependency(rule_set)
        CfnRule(
            self,
            "ReceivingRegion",
            assertions=[
                CfnRuleAssertion(
                    assert_=Fn.condition_contains(sorted(MAIL.receiving_regions), Aws.REGION),
                    assert_description="Amazon SES receives e-mail only in "
                    + ", ".join(sorted(MAIL.receiving_regions)),
                )
            ],
        )
        self._read_by_ingress(ingress, bucket)
        self._feedback_to(ingress, name)
        # (the configuration set's fixed name, not a reference: the grant names it as SES checks it)
        self._send_from([functions[f] for f in SENDERS], address, domain, name)
        # The CLI's `email` commands read these back (their keys: hermes_gateway.outputs).
        CfnOutput(stack, EMAIL_RULE_SET_OUTPUT, value=rule_set_name, description="The SES receipt rule set of the rule")
        CfnOutput(stack, EMAIL_ADDRESS_OUTPUT, value=address, description="The address the agent receives mail at")
        self.rule_set_name = rule_set_name
        self.rule_arn = rule_arn

    def _receive_into(self, bucket: s3.Bucket, retention_days: int, conditions: dict[str, dict[str, str]]) -> None:
        """SES may write received mail under the prefix, as this rule of this account only; the
        stored messages expire sooner than the bucket's other objects (resources.MAIL)."""
        bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="SesStoresReceivedMail",
                principals=[iam.ServicePrincipal("ses.amazonaws.com")],
                actions=["s3:PutObject"],
                resources=[bucket.arn_for_objects(MAIL.prefix + "*")],
                conditions=conditions,
            )
        )
        bucket.add_lifecycle_rule(
            id="expire-received-mail",
            prefix=MAIL.prefix,
            expiration=Duration.days(min(MAIL.retention_days, retention_days)),
        )

    def _read_by_ingress(self, ingress: GatewayFunction, bucket: s3.Bucket) -> None:
        """The ingress reads each stored message once and deletes one it refuses; nothing else of
        the bucket."""
        ingress.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject", "s3:DeleteObject"], resources=[bucket.arn_for_objects(MAIL.prefix + "*")]
            )
        )
        ingress.add_environment(MEDIA.env_var, bucket.bucket_name)
        acknowledge(
            ingress.role,
            arn_finding(bucket, f"/{MAIL.prefix}*"),
            "The e-mail SES stored, one object per message under the bucket's mail prefix: the ingress "
            "reads each message once and deletes one it refuses. No other object, no listing.",
        )

    def _feedback_to(self, ingress: GatewayFunction, name: str) -> ses.ConfigurationSet:
        """The configuration set every answer is sent with: its bounces, complaints and rejections
        reach the ingress function through the default event bus."""
        configuration_set = ses.ConfigurationSet(self, "Sending", configuration_set_name=name)
        default_bus = events.EventBus.from_event_bus_name(self, "DefaultBus", "default")
        configuration_set.add_event_destination(
            "Feedback", destination=ses.EventDestination.event_bus(default_bus), events=list(FEEDBACK_EVENTS)
        )
        events.Rule(
            self,
            "FeedbackRule",
            description="SES bounces, complaints and rejections of the gateway's mail: the outbox row fails",
            event_pattern=events.EventPattern(
                source=["aws.ses"],
                detail={"eventType": list(FEEDBACK_TYPES), "mail": {"tags": {"ses:configuration-set": [name]}}},
            ),
            targets=[targets.LambdaFunction(ingress.function)],
        )
        return configuration_set

    def _send_from(self, senders: list[GatewayFunction], address: str, domain: str, configuration_set: str) -> None:
        """SendEmail (raw content: SendRawEmail too, as CDK's own grant has it) from the address only."""
        stack = Stack.of(self)
        resources = [
            stack.format_arn(service="ses", resource="identity", resource_name=domain),
            stack.format_arn(service="ses", resource="identity", resource_name=address),
            stack.format_arn(service="ses", resource="configuration-set", resource_name=configuration_set),
        ]
        for sender in senders:
            sender.role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["ses:SendEmail", "ses:SendRawEmail"],
                    resources=resources,
                    conditions={"StringEquals": {"ses:FromAddress": address}},
                )
            )
