"""The public webhook endpoint, as `ingress.endpoint` chooses:

- `http_api` (the default): an HTTP API with one route per enabled platform (`/webhooks/<name>`,
  with the methods the platform uses), each invoking the ingress function; a named profile's
  platforms under `/p/<profile>/webhooks/<name>`. A disabled platform has no route at all: API
  Gateway answers 404 without invoking (or billing) a function. The stage throttles and logs each
  request (1 USD per million requests, and about 0.17 for its access line).
- `function_url`: the ingress function's own URL (auth NONE: platforms cannot sign in to AWS; the
  function verifies every request), with the same paths. Lambda bills no request price for it. The
  function answers an unknown or disabled platform 404 and a method its platform does not use
  405 itself, as it does in local mode; there is no stage throttle (the account's Lambda
  concurrency bounds a flood) and no access log (the function logs every request it rejects).

The session API (IAM-signed) is an HTTP API route either way: it is not on a message's path.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import jsii
from aws_cdk import Annotations, RemovalPolicy, Stack, Token
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
# Regions without Lambda function URLs when this was written (AWS Lambda developer guide, "Lambda function URLs").
NO_FUNCTION_URLS = frozenset({
    "ap-south-2", "ap-southeast-4", "ap-southeast-5", "ap-southeast-6", "ap-southeast-7", "ap-east-2",
    "ca-west-1", "eu-south-2", "eu-central-2", "il-central-1", "me-central-1",
})  # fmt: skip
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
        endpoint: str = "http_api",
    ) -> None:
        """`platforms`: (profile, spec) for every profile's enabled platform; None for the deployment's
        own. `endpoint`: where the platforms post (`ingress.endpoint`, checked with the settings)."""
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
        self.function_url: lambda_.FunctionUrl | None = None
        if endpoint == "function_url":
            self._serve_from_function_url(handler)
            platforms = ()  # the function's URL takes every path: no webhook route on the HTTP API
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

    def _serve_from_function_url(self, handler: lambda_.IFunction) -> None:
        region = Stack.of(self).region
        if not Token.is_unresolved(region) and region in NO_FUNCTION_URLS:
            Annotations.of(self).add_warning_v2(
                "hermes:function-url-region",
                f"Lambda function URLs were not offered in {region} when this was written: if the deploy "
                "fails on the ingress URL, set ingress.endpoint to http_api",
            )
        # CDK grants what a public URL needs since October 2025: lambda:InvokeFunctionUrl for
        # auth NONE and lambda:InvokeFunction only when invoked through the URL.
        self.function_url = lambda_.FunctionUrl(
            self, "IngressUrl", function=handler, auth_type=lambda_.FunctionUrlAuthType.NONE
        )

    @property
    def url(self) -> str:
        """The API's base URL (the session API's), ending with '/'."""
        return self.stage.url

    @property
    def webhook_url(self) -> str:
        """Where the platforms post, ending with '/': the function's URL or the API's."""
        return self.function_url.url if self.function_url is not None else self.stage.url

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
