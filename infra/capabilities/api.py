"""The public webhook endpoint: an HTTP API with one route per enabled platform (`/webhooks/<name>`,
with the methods the platform uses), each invoking the ingress function; a named profile's platforms
under `/p/<profile>/webhooks/<name>`. A disabled platform has no route at all: API Gateway answers
404 without invoking (or billing) a function."""

from __future__ import annotations

import json
from collections.abc import Sequence

import jsii
from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_apigatewayv2 as apigatewayv2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk.aws_apigatewayv2_authorizers import HttpIamAuthorizer
from aws_cdk.aws_apigatewayv2_integrations import HttpLambdaIntegration
from constructs import Construct

from hermes_gateway.platforms.catalog import PlatformSpec
from infra.capabilities.functions import LOG_RETENTION
from infra.nag import acknowledge

SESSION_API_PATH = "/api/sessions"
# Stage-wide limits: far above one gateway's traffic, low enough to cap the bill of a flood.
THROTTLE_RATE_PER_SECOND = 50
THROTTLE_BURST = 100
# No headers, query strings or bodies: webhook secrets travel in headers and must not be logged.
ACCESS_LOG_FORMAT = json.dumps(
    {
        "requestId": "$context.requestId",
        "requestTime": "$context.requestTime",
        "ip": "$context.identity.sourceIp",
        "routeKey": "$context.routeKey",
        "path": "$context.path",
        "status": "$context.status",
        "responseLength": "$context.responseLength",
        "latency": "$context.responseLatency",
        "integrationStatus": "$context.integrationStatus",
        "integrationError": "$context.integrationErrorMessage",
    }
)


class WebhookApi(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: lambda_.IFunction,
        api_name: str,
        platforms: Sequence[tuple[str | None, PlatformSpec]],
    ) -> None:
        """`platforms`: (profile, spec) for every profile's enabled platform; None for the deployment's own."""
        super().__init__(scope, construct_id)
        self.http_api = apigatewayv2.HttpApi(
            self,
            "HttpApi",
            api_name=api_name,
            description="Hermes Gateway webhooks",
            create_default_stage=False,
        )
        # One invoke permission for the whole API, not one per route: every route's own statement
        # (about 450 bytes) would outgrow the function's 20 KB resource policy with every platform
        # and two named profiles, and the deploy would fail.
        integration = HttpLambdaIntegration(
            "Ingress",
            handler,
            payload_format_version=apigatewayv2.PayloadFormatVersion.VERSION_2_0,
            scope_permission_to_route=False,
        )
        routes = [
            route
            for profile, platform in platforms
            for path in platform.webhook_paths(profile)
            for route in self.http_api.add_routes(
                path=path,
                methods=[apigatewayv2.HttpMethod(m) for m in platform.methods],
                integration=integration,
            )
        ]
        for route in routes:
            acknowledge(
                route,
                "APIG4",
                "Platform webhooks are public by design: platforms cannot sign in to AWS. The ingress "
                "function verifies every request (platform signature or shared secret) before enqueuing.",
            )
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY
        )
        self.stage = apigatewayv2.HttpStage(
            self,
            "DefaultStage",
            http_api=self.http_api,
            auto_deploy=True,
            throttle=apigatewayv2.ThrottleSettings(rate_limit=THROTTLE_RATE_PER_SECOND, burst_limit=THROTTLE_BURST),
            access_log_settings=AccessLogSettings(
                apigatewayv2.LogGroupLogDestination(self.access_logs),
                apigateway.AccessLogFormat.custom(ACCESS_LOG_FORMAT),
            ),
        )

    @property
    def url(self) -> str:
        """The API's base URL, ending with '/'."""
        return self.stage.url

    def add_session_api(self, handler: lambda_.IFunction, profiles: Sequence[str] = ()) -> str:
        """`POST /api/sessions` for the deployment's own profile and `POST /p/<profile>/api/sessions`
        for each named one, IAM-signed (SigV4, service `execute-api`): only principals granted
        `execute-api:Invoke` on a route's ARN reach the session API function for that profile, so
        one profile's operators get no other's sessions. Returns the deployment's own URL."""
        integration = HttpLambdaIntegration(
            "SessionApi", handler, payload_format_version=apigatewayv2.PayloadFormatVersion.VERSION_2_0
        )
        for path in (SESSION_API_PATH, *(f"/p/{profile}{SESSION_API_PATH}" for profile in profiles)):
            self.http_api.add_routes(
                path=path,
                methods=[apigatewayv2.HttpMethod.POST],
                integration=integration,
                authorizer=HttpIamAuthorizer(),
            )
        return f"{self.url}{SESSION_API_PATH.lstrip('/')}"


@jsii.implements(apigatewayv2.IAccessLogSettings)
class AccessLogSettings:
    """`IAccessLogSettings` for the stage (a jsii interface, so a small Python class implements it)."""

    def __init__(self, destination: apigatewayv2.IAccessLogDestination, log_format: apigateway.AccessLogFormat) -> None:
        self._destination = destination
        self._format = log_format

    @property
    def destination(self) -> apigatewayv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigateway.AccessLogFormat:
        return self._format
