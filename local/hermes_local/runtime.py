"""Local mode: the whole gateway in one process on loopback (ARCHITECTURE §8).

moto (server mode) is the AWS; the functions' handlers run in-process: the HTTP front calls
ingress, a stream poller calls the router as Lambda's event source mapping on the inbox stream
would (new items only, in order per session, partial batch failures retried, then given up to the
dead letters), asynchronous invokes of the delivery function run on worker threads with Lambda's
retries and dead-letter queue, Step Functions executions run inside moto and invoke the agent
handler, and a timer plays EventBridge Scheduler.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from hermes_cli.target import LOCAL_STATE_ENV, remove_local_state, write_local_state
from hermes_gateway.platforms import catalog
from hermes_gateway.providers.echo import STREAM_DELAY_ENV  # tests: a slow echo that streams
from hermes_gateway.resources import FUNCTIONS, QUEUES, SCHEDULES, SECRET_NAMES, TABLES, FunctionSpec, repo_root
from hermes_gateway.secrets import profile_secret_name
from hermes_gateway.settings import (
    PROFILES_ENV,
    SETTINGS_FILE_ENV,
    Settings,
    configured_paths,
    load_settings,
    read_yaml,
    settings_env,
    write_settings_file,
)

REGION = "us-east-1"
PREFIX = "hermes-local"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LambdaContext:
    """What a handler may read from its context object."""

    function_name: str
    memory_limit_in_mb: int
    invoked_function_arn: str
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    deadline: float = 0.0

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.time()) * 1000))


def load_handler_module(spec: FunctionSpec, root: Path | None = None) -> ModuleType:
    """Import a function's handler from its code directory under a unique module name, since all
    functions share one interpreter here (in Lambda each is `handler` in its own sandbox)."""
    module_file, _ = spec.handler.split(".", 1)
    path = (root or repo_root()) / spec.code_dir / f"{module_file}.py"
    name = f"hermes_function_{spec.name}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


# The collector's first threshold while local mode runs: container allocations between two young
# collections (Python's default is 700). See `tune_garbage_collector`.
GC_YOUNG_THRESHOLD = 50_000


def tune_garbage_collector() -> tuple[int, ...]:
    """Collect, then keep what the process holds after booting out of every later collection,
    and collect the young generation less often; the thresholds before, for `stop`.

    Local mode runs moto in this interpreter: half a million objects once it is up (botocore's
    service models, the handlers' modules, moto's state), and more with every message (the
    items it stores). With Python's defaults the collector walked them again and again: 6 ms
    of a message's 78 ms of CPU at 100 sessions (gc.callbacks around bench/throughput.py's
    levels; 2.2 ms after this): a full collection of the growing heap every few seconds, and a
    young one every 700 allocations, which a single DynamoDB call makes several times over.
    Reference counting frees objects as before; a frozen object that ends up in a reference
    cycle stays until `stop` unfreezes them, and newer cyclic garbage waits at most
    GC_YOUNG_THRESHOLD allocations longer."""
    saved = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, saved[1], saved[2])
    return saved


def restore_garbage_collector(saved: tuple[int, ...]) -> None:
    """Undo `tune_garbage_collector`: the frozen objects are collected again, at `saved` thresholds."""
    gc.unfreeze()
    gc.set_threshold(*saved)


class Functions:
    """The deployment's functions, invocable by name as Lambda would invoke them."""

    def __init__(self, prefix: str, region: str) -> None:
        self.prefix = prefix
        self.region = region
        self.specs = {spec.name: spec for spec in FUNCTIONS}
        self.handlers = {
            spec.name: getattr(load_handler_module(spec), spec.handler.split(".", 1)[1]) for spec in FUNCTIONS
        }

    def resolve(self, physical_name: str) -> Any:
        name = physical_name.removeprefix(self.prefix + "-")
        return functools.partial(self._call, name) if name in self.handlers else None

    def context(self, physical_name: str) -> LambdaContext:
        name = physical_name.removeprefix(self.prefix + "-")
        spec = self.specs[name]
        return LambdaContext(
            function_name=f"{self.prefix}-{name}",
            memory_limit_in_mb=spec.memory_mb,
            invoked_function_arn=f"arn:aws:lambda:{self.region}:123456789012:function:{self.prefix}-{name}",
            deadline=time.time() + spec.timeout_seconds,
        )

    def invoke(self, name: str, event: dict[str, Any]) -> Any:
        return self._call(name, event, self.context(name))

    def _call(self, name: str, event: dict[str, Any], context: Any) -> Any:
        try:
            return self.handlers[name](event, context)
        finally:
            # Metrics are not published locally; without a flush they would pile up in memory.
            from hermes_gateway.observability import metrics

            metrics.clear_metrics()


# Amazon Polly's endpoint (botocore reads it before AWS_ENDPOINT_URL): local mode's moto synthesizes
# no Ogg/Opus, so `tts.provider: polly` speaks locally only through a server this names.
POLLY_ENDPOINT_ENV = "AWS_ENDPOINT_URL_POLLY"


def local_settings_env(config_path: Path | None, environ: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Settings for local mode as environment variables, plus notices to print at start-up.

    Defaults let a newcomer chat at once: the web chat page is on, and when no allowlist or
    allow-all is configured anywhere, everyone is allowed (and start-up says so)."""
    notices: list[str] = []
    source = str(config_path or "defaults")
    config = read_yaml(config_path) if config_path and config_path.exists() else {}
    explicit = configured_paths(config, environ, source)
    env = dict(environ)
    # Local defaults apply only where the user chose nothing, in the file or the environment.
    if "platforms.webchat.enabled" not in explicit:
        env["WEBCHAT_ENABLED"] = "true"
    if "hooks.bus_events" not in explicit:  # every event on the page's log (on AWS each costs)
        env["GATEWAY_BUS_EVENTS"] = "*"
    for spec in catalog.CATALOG:
        # A platform whose verification secrets are all set is on, unless the user said otherwise.
        enabled_path = f"platforms.{spec.name}.enabled"
        if enabled_path not in explicit and spec.verify_env and all(environ.get(n) for n in spec.verify_env):
            env[f"{spec.name.upper()}_ENABLED"] = "true"
    access_paths = {"access.allowed_users", "access.allow_all_users"} | {
        f"platforms.{spec.name}.{attr}" for spec in catalog.CATALOG for attr in ("allowed_users", "allow_all_users")
    }
    # (the web chat page allows everyone by its own default, which says nothing of the others)
    access_paths -= {"platforms.webchat.allowed_users", "platforms.webchat.allow_all_users"}
    if not access_paths & explicit:
        env["GATEWAY_ALLOW_ALL_USERS"] = "true"
        notices.append(
            "no allowlist configured: local mode allows EVERY user "
            "(set TELEGRAM_ALLOWED_USERS, EMAIL_ALLOWED_USERS or GATEWAY_ALLOWED_USERS to restrict)"
        )
    settings: Settings = load_settings(env=env, config=config, source=source)
    if not environ.get(POLLY_ENDPOINT_ENV) and any(p.tts.provider == "polly" for p in settings.all_profiles()):
        notices.append(
            "tts.provider polly: local mode's AWS cannot speak (moto has no Ogg/Opus voices), so answers "
            f"go as text with a note; set {POLLY_ENDPOINT_ENV} to a Polly-compatible server, or use provider openai"
        )
    return settings_env(settings), notices


def operator_cli() -> str:
    """The CLI as the user runs it from where local mode started: `hermes-gateway` when that is
    the one on PATH, else the path of the one beside this interpreter (`.venv/bin/hermes-gateway`
    after `make install`), which the pairing reply then names."""
    script = Path(sys.executable).parent / "hermes-gateway"
    found = shutil.which("hermes-gateway")
    if found is not None and Path(found).resolve() == script.resolve():
        return "hermes-gateway"
    relative = os.path.relpath(script)
    return relative if not relative.startswith("..") else str(script)


def _set_function_log_level(level: str | int) -> str | int:
    """The functions' logger at `level`; the level it had. The logger is made when its module is
    first imported (the CLI imports it before local mode starts), so POWERTOOLS_LOG_LEVEL set for
    the functions afterwards would not reach it: every INFO line would print."""
    from hermes_gateway.observability import logger

    saved: str | int = logger.log_level
    logger.setLevel(level)
    return saved


def profile_platforms(settings: Settings) -> dict[str, list[str]]:
    """Named profile -> the platforms it serves, in catalog order."""
    return {
        name: [spec.name for spec in catalog.CATALOG if named.platform(spec.name) is not None]
        for name, named in settings.profiles.items()
    }


def profile_secrets(environ: dict[str, str], profiles: list[str]) -> dict[str, str]:
    """The named profiles' own secrets (`<NAME>__<PROFILE>`) as given in the environment."""
    wanted = {profile_secret_name(name, profile) for profile in profiles for name in SECRET_NAMES}
    return {name: value for name, value in environ.items() if name in wanted and value}


class LocalGateway:
    """Start and stop the whole local system. Used by `hermes-gateway local` and the e2e tests."""

    def __init__(
        self,
        *,
        port: int = 8080,
        host: str = "127.0.0.1",
        config_path: Path | None = None,
        environ: dict[str, str] | None = None,
        tick_seconds: float = 60.0,
        poll_wait_seconds: float = 1.0,
        async_retry_delays: tuple[float, ...] = (1.0, 2.0),
    ) -> None:
        """`poll_wait_seconds`: the longest a stream poller sleeps between looks at an idle stream
        (a write wakes it at once); `async_retry_delays`: the waits before Lambda's retries of a
        failed asynchronous invoke (about 60 and 120 s in AWS; short here, so a retry is seen)."""
        self.port = port
        self.host = host
        self.config_path = config_path
        self.base_environ = dict(os.environ if environ is None else environ)
        self.tick_seconds = tick_seconds
        self.poll_wait_seconds = poll_wait_seconds
        self.async_retry_delays = async_retry_delays
        self.asynchronous: Any = None  # hermes_local.aws.AsyncInvokes, once started
        self.pollers: list[Any] = []  # hermes_local.pollers.StreamPoller, once started
        self.notices: list[str] = []
        self.local_secrets: dict[str, str] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._saved_environ: dict[str, str] | None = None
        self._saved_gc: tuple[int, ...] | None = None
        self._settings_dir: str | None = None
        self._state_path: Path | None = None  # the state file the CLI's `--local` reads
        self._saved_log_level: str | int | None = None
        self.started_at = 0.0
        self.settings: Settings | None = None  # what the functions run with, once started

    def enabled_platforms(self) -> list[str]:
        """The platforms whose webhooks this local mode accepts (the deployment's own profile's)."""
        chosen = self.settings
        return [s.name for s in catalog.CATALOG if chosen is not None and chosen.platform(s.name) is not None]

    def profile_platforms(self) -> dict[str, list[str]]:
        """Each named profile's enabled platforms (its webhooks are `/p/<profile>/webhooks/<platform>`)."""
        return profile_platforms(self.settings) if self.settings is not None else {}

    def email_address(self) -> str | None:
        """The address e-mail is received at, when e-mail is on (the deployment's own profile)."""
        chosen = self.settings.platform("email") if self.settings is not None else None
        return str(chosen.options["address"]).lower() if chosen is not None else None

    def receive_email(self, raw: bytes, verdicts: dict[str, str] | None = None) -> str:
        """A raw RFC 822 message received as SES would (hermes_local.ses); its SES message id."""
        from hermes_gateway.resources import MEDIA, function
        from hermes_local.ses import receive

        address = self.email_address()
        if address is None:
            raise ValueError("e-mail is not enabled (EMAIL_ENABLED and EMAIL_ADDRESS)")
        return receive(
            raw,
            bucket=os.environ[MEDIA.env_var],
            function_arn=os.environ[function("ingress").env_var],
            address=address,
            verdicts=verdicts,
            region=REGION,
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def aws_endpoint(self) -> str:
        """The embedded AWS (moto's server on loopback), for other processes (the CLI, the AWS CLI)."""
        return f"http://127.0.0.1:{self.moto_port}"

    def shown_secrets(self) -> dict[str, str]:
        """The local secrets as start-up prints them: a generated one in full (the user needs it to
        sign requests), one the user set in the environment masked (they know it, and a terminal
        is shared, recorded or pasted into an issue)."""
        return {
            name: "******** (from the environment)" if self.base_environ.get(name) else value
            for name, value in self.local_secrets.items()
        }

    def start(self) -> LocalGateway:
        from hermes_gateway import wiring
        from hermes_local.aws import (
            IN_PROCESS,
            AsyncInvokes,
            configure_moto,
            create_resources,
            install_lambda_dispatch,
            local_aws_environment,
            loopback_moto_server,
        )
        from hermes_local.http_front import serve

        self.started_at = time.time()
        self._saved_environ = dict(os.environ)
        env_vars, self.notices = local_settings_env(self.config_path, self.base_environ)
        for name in ("TELEGRAM_WEBHOOK_SECRET", "WEBCHAT_TOKEN", "SESSION_API_TOKEN"):
            self.local_secrets[name] = self.base_environ.get(name) or secrets.token_urlsafe(24)
        self.settings = load_settings(env=env_vars, config={})
        # The functions read their settings from one file, as deployed (hermes_gateway.settings.shipped).
        self._settings_dir = tempfile.mkdtemp(prefix="hermes-local-settings-")
        settings_file = Path(self._settings_dir) / "settings.json"
        write_settings_file(self.settings, settings_file)
        named = profile_platforms(self.settings)
        for profile in (p for p, platforms in named.items() if "telegram" in platforms):
            name = profile_secret_name("TELEGRAM_WEBHOOK_SECRET", profile)  # each bot its own, as above
            self.local_secrets[name] = self.base_environ.get(name) or secrets.token_urlsafe(24)
        self.moto_port = free_port()
        env = {
            SETTINGS_FILE_ENV: str(settings_file),
            **local_aws_environment(self.moto_port, REGION),
            **self.local_secrets,
            "HERMES_LOCAL_MODE": "1",
            wiring.LOCAL_CLI_ENV: operator_cli(),
            **{
                k: v
                for k, v in self.base_environ.items()
                if k in (LOCAL_STATE_ENV, wiring.LOCAL_OUTBOX_PREVIEW_ENV, STREAM_DELAY_ENV, POLLY_ENDPOINT_ENV)
            },
            "POWERTOOLS_METRICS_DISABLED": "true",
            "POWERTOOLS_SERVICE_NAME": "hermes-gateway",
            "POWERTOOLS_LOG_LEVEL": self.base_environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
        }
        for name in SECRET_NAMES:  # every other secret is read from the environment, as given
            if name not in env and self.base_environ.get(name):
                env[name] = self.base_environ[name]
        env.update({k: v for k, v in profile_secrets(self.base_environ, list(named)).items() if k not in env})
        for name in env_vars.keys() | {PROFILES_ENV}:  # a variable would override the file (`stop` restores them)
            os.environ.pop(name, None)
        os.environ.update(env)
        wiring.reset()
        self._saved_log_level = _set_function_log_level(env["POWERTOOLS_LOG_LEVEL"])

        configure_moto()
        self.functions = Functions(PREFIX, REGION)
        self.asynchronous = AsyncInvokes({}, retry_delays=self.async_retry_delays, region=REGION)
        install_lambda_dispatch(self.functions.resolve, self.functions.context, self.asynchronous)
        self._moto = loopback_moto_server(self.moto_port)
        self._moto.start()
        IN_PROCESS.serve(f"http://127.0.0.1:{self.moto_port}", self._moto.app)
        # moto's state lives in this interpreter; a fresh start must not see an earlier run's data.
        urllib.request.urlopen(
            urllib.request.Request(f"http://127.0.0.1:{self.moto_port}/moto-api/reset", method="POST"), timeout=10
        ).close()
        _, resource_env = create_resources(REGION, PREFIX)
        os.environ.update(resource_env)
        wiring.reset()
        if self.email_address():
            from hermes_gateway.platforms.email import domain_of
            from hermes_local.ses import prepare_sending

            prepare_sending(domain_of(self.settings.platforms["email"].options), self.settings.stage, REGION)
        queue_urls = {q.name: resource_env[q.env_var] for q in QUEUES}
        self.asynchronous.dead_letter_urls.update(
            {f"{PREFIX}-{spec.name}": queue_urls[spec.dead_letters] for spec in FUNCTIONS if spec.dead_letters}
        )
        for spec in FUNCTIONS:
            if spec.consumes is not None:
                self._start_poller(spec, resource_env, queue_urls[spec.consumes.on_failure])
        for schedule in SCHEDULES:
            self._spawn(f"schedule-{schedule.name}", self._tick, schedule.function)
        self._http = serve(self, self.host, self.port)
        self.port = self._http.server_address[1]
        # How the CLI's `--local` (another process) finds this gateway and its embedded AWS;
        # written once the port is known.
        self._state_path = write_local_state(
            {
                "pid": os.getpid(),
                "url": self.url,
                "platforms": self.enabled_platforms(),
                # the deployment's own profile's name, and each named profile's enabled platforms
                "profile": self.settings.profile,
                "profiles": self.profile_platforms(),
                "aws_environment": local_aws_environment(self.moto_port, REGION),
                "resources": resource_env,
                # `hermes-gateway sessions --local` (the state file is the user's own, under ~/.cache)
                "session_api": {"url": f"{self.url}/api/sessions", "token": self.local_secrets["SESSION_API_TOKEN"]},
                # `hermes-gateway email receive --local`: the address the receipt rule is for
                "email_address": self.email_address(),
            },
            self.port,
        )
        self._saved_gc = tune_garbage_collector()
        return self

    def _spawn(self, name: str, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _start_poller(self, spec: FunctionSpec, resource_env: dict[str, str], on_failure_url: str) -> None:
        from hermes_local.aws import stream_env_var
        from hermes_local.pollers import StreamPoller

        assert spec.consumes is not None
        table = next(t for t in TABLES if t.name == spec.consumes.table)
        stream_arn = resource_env[stream_env_var(table)]
        poller = StreamPoller(self.functions, spec, stream_arn, on_failure_url, self._stop, self.poll_wait_seconds)
        self.pollers.append(poller)
        for thread in poller.threads():
            thread.start()
            self._threads.append(thread)

    def _tick(self, function: str) -> None:
        while not self._stop.wait(self.tick_seconds):
            self.run_schedule(function)

    def run_schedule(self, function: str) -> Any:
        event = {"source": "aws.scheduler", "detail-type": "Scheduled Event", "time": time.time()}
        try:
            return self.functions.invoke(function, event)
        except Exception as exc:  # noqa: BLE001 - a failed tick is logged; the next tick runs anyway
            print(f"[local] scheduled {function} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return None

    def busy(self) -> list[str]:
        """What is still going on: stream records not yet routed, asynchronous invokes not yet
        done (retries included), running turns. Empty when the gateway is idle."""
        import boto3

        from hermes_gateway.resources import TURN_STATE_MACHINE

        found = []
        if any(poller.pending() for poller in self.pollers):
            found.append("inbox")
        if self.asynchronous is not None and self.asynchronous.pending:
            found.append("deliveries")
        machine = os.environ.get(TURN_STATE_MACHINE.env_var)
        if machine:
            running = boto3.client("stepfunctions").list_executions(stateMachineArn=machine, statusFilter="RUNNING")
            if running["executions"]:
                found.append("turns")
        return found

    def wait_idle(self, timeout: float = 15.0, looks: int = 3) -> bool:
        """Until nothing has been going on for `looks` looks in a row (True), or `timeout` seconds."""
        deadline, calm = time.time() + timeout, 0
        while calm < looks:
            if time.time() > deadline:
                return False
            time.sleep(0.2)
            calm = 0 if self.busy() else calm + 1
        return True

    def health(self) -> dict[str, Any]:
        return {
            "ok": all(t.is_alive() for t in self._threads),
            "uptime_seconds": round(time.time() - self.started_at, 1),
            "functions": sorted(self.functions.handlers),
            "aws_endpoint": self.aws_endpoint,
        }

    def events(self) -> list[dict[str, Any]]:
        """The lifecycle events the functions published to the event bus, newest last."""
        from hermes_gateway import wiring

        return list(getattr(wiring.events(), "recent", []))

    def outbox(self, chat_id: str | None = None, platform: str | None = None) -> list[dict[str, Any]]:
        """Every delivery that would have gone to a platform, newest last. A file's row names its
        stored object with a pre-signed URL of the embedded S3 (`reference`: the page shows it); a
        web chat answer that is streaming shows its text so far."""
        from hermes_gateway import wiring
        from hermes_gateway.platforms.outbound_media import LINK_SECONDS
        from hermes_gateway.platforms.webchat import live_text

        store = wiring.media_store()
        rows = []
        for row in wiring.outbox().recent():
            if (chat_id is None or row.chat_id == chat_id) and (platform is None or row.platform == platform):
                found = row.to_dict()
                if row.status == "streaming":  # the web chat's streamed message shows the text so far
                    found["text"] = live_text(row.platform_message_id) or row.text
                if row.media and store is not None:
                    found["media"] = [{**m, "reference": store.url(m["key"], LINK_SECONDS)} for m in row.media]
                rows.append(found)
        mailed = {str(r.get("platform_message_id")) for r in rows if r.get("platform") == "email"}
        if mailed:  # an e-mail's headers, as the embedded SES sent it (a mail client threads by them)
            from hermes_local.ses import sent_mail

            headers = sent_mail(mailed)
            for found in rows:
                sent_as = str(found.get("platform_message_id"))
                if found.get("platform") == "email" and sent_as in headers:
                    found["email"] = headers[sent_as]
        return rows

    def stop(self) -> None:
        self._stop.set()
        if getattr(self, "_http", None) is not None:
            self._http.shutdown()
            self._http.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        if self.asynchronous is not None:
            self.asynchronous.close()
        if getattr(self, "_moto", None) is not None:
            from hermes_local.aws import IN_PROCESS

            IN_PROCESS.forget(f"http://127.0.0.1:{self.moto_port}")
            self._moto.stop()
        if self._state_path is not None:
            remove_local_state(self._state_path, os.getpid())
            self._state_path = None
        if self._saved_gc is not None:
            restore_garbage_collector(self._saved_gc)
            self._saved_gc = None
        if self._saved_environ is not None:
            os.environ.clear()
            os.environ.update(self._saved_environ)
        if self._saved_log_level is not None:
            _set_function_log_level(self._saved_log_level)
            self._saved_log_level = None
        if self._settings_dir is not None:
            shutil.rmtree(self._settings_dir, ignore_errors=True)
        from hermes_gateway import wiring

        wiring.reset()

    def __enter__(self) -> LocalGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
