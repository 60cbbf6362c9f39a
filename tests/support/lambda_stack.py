"""What the end-to-end Lambda tests share: fake AWS credentials, a function's environment as
deployed from template.yaml, a fresh bucket and fresh queues on the shared moto server, the
handler modules (each test invokes a handler made over a container of its own,
``app.make_handler(Container())``), and the helpers that fill and merge a small lake through a
container built from the environment.

Each test module keeps its own ``Stack`` and whatever differs between the functions.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Self

import boto3
import pytest

from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import LambdaHandler
from icefloe.ingest import Inserter
from icefloe.merge import MergeWorker, merge_locally
from icefloe.query.s3_access import configure_s3_from_settings
from icefloe.runtime import Runtime
from support.aws import (
    FAKE_AWS_ENVIRONMENT,
    REGION,
    UNSET_AWS_VARIABLES,
    CreatedQueue,
    FakeLambdaContext,
    create_bucket,
    create_queues,
    function_environment,
)
from support.template import FunctionDecl, import_handler_module, load_template

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

TEMPLATE = load_template()
PREFIX = str(TEMPLATE.parameter_default("WarehousePrefix"))
DAYS = 3
BATCHES = 5

# Credentials that only mean something to moto in process (``mock_aws``); requests to the moto
# server over HTTP go without them.
SESSION_TOKEN_VARIABLES = ("AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN")
# Variables of a developer's machine that would change what the functions do.
UNSET_ICEFLOE_VARIABLES = (
    "ICEFLOE_DATABASE_SECRET_ARN",
    "ICEFLOE_S3_ENDPOINT_URL",
    "ICEFLOE_MERGE_MEMORY_LIMIT",
    "ICEFLOE_MERGE_THREADS",
)


# -- the environment ---------------------------------------------------------------------------


def use_fake_aws(monkeypatch: pytest.MonkeyPatch, *, session_token: bool) -> None:
    """Fake credentials and region, and nothing of the machine's that would send boto3 (or the
    functions) elsewhere. ``session_token=False`` for the moto server over HTTP."""
    for name in (*UNSET_AWS_VARIABLES, *UNSET_ICEFLOE_VARIABLES, *SESSION_TOKEN_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_AWS_ENVIRONMENT.items():
        if session_token or name not in SESSION_TOKEN_VARIABLES:
            monkeypatch.setenv(name, value)


def set_environment(monkeypatch: pytest.MonkeyPatch, environment: Mapping[str, str]) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)


@dataclass(frozen=True)
class Deployment:
    """What every function's environment gets beside the template's: this test's meta store
    schema and a home of its own."""

    postgres_dsn: str
    schema_name: str
    home: Path

    def environment(
        self,
        function: FunctionDecl,
        *,
        resources: Mapping[str, str],
        s3_endpoint: str | None = None,
        memory_size: bool = False,
    ) -> dict[str, str]:
        """``function``'s environment as deployed with these resources; ``s3_endpoint`` sends
        the function's S3 and DuckDB's httpfs to the moto server, ``memory_size`` sets what
        Lambda sets from the function's MemorySize."""
        environment = function_environment(TEMPLATE, function, resources=resources)
        environment.update(
            ICEFLOE_DATABASE_URL=self.postgres_dsn, ICEFLOE_DATABASE_SCHEMA=self.schema_name
        )
        if s3_endpoint is not None:
            environment["ICEFLOE_S3_ENDPOINT_URL"] = s3_endpoint
        environment["ICEFLOE_HOME"] = str(self.home)
        if memory_size:
            environment["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = str(function.memory_size)
        environment["POWERTOOLS_TRACE_DISABLED"] = "1"
        return environment


@contextmanager
def fresh_container(app: ModuleType) -> Iterator[FunctionUnderTest]:
    """``app``'s handler over a container of the test's own, built from the environment on the
    first invocation (as Lambda's is) and closed after."""
    with Container() as container:
        yield FunctionUnderTest(container=container, handler=app.make_handler(container))


@dataclass(frozen=True)
class FunctionUnderTest:
    """A function's handler and the container it runs over."""

    container: Container
    handler: LambdaHandler


# -- the moto server ---------------------------------------------------------------------------


@dataclass
class MotoWorld:
    """A fresh bucket built from the template (and, when asked, every queue it declares) on
    the shared moto server, named apart from every other test's."""

    unique: str
    s3: S3Client
    sqs: SQSClient
    bucket: str
    queues: dict[str, CreatedQueue] = field(default_factory=dict)

    @classmethod
    def create(cls, moto_endpoint: str, kind: str, *, queues: bool = True) -> MotoWorld:
        unique = uuid.uuid4().hex[:10]
        s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name=REGION)
        sqs = boto3.client("sqs", endpoint_url=moto_endpoint, region_name=REGION)
        bucket = create_bucket(s3, TEMPLATE, f"icefloe-e2e-{kind}-{unique}")
        world = cls(unique=unique, s3=s3, sqs=sqs, bucket=bucket)
        if queues:
            world.queues = create_queues(sqs, TEMPLATE, name_prefix=f"t{unique}-")
        return world


def object_keys(s3: S3Client, bucket: str) -> set[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


# -- handlers ----------------------------------------------------------------------------------


def handler_module_fixture(function: FunctionDecl, *, name: str) -> Any:
    """A module-scoped fixture called ``name``: ``function``'s handler module, imported once."""

    def handler_module() -> ModuleType:
        return import_handler_module(function)

    return pytest.fixture(scope="module", name=name)(handler_module)


def lambda_context(function: FunctionDecl) -> FakeLambdaContext:
    return FakeLambdaContext(
        function_name=function.logical_id, memory_limit_in_mb=function.memory_size or 128
    )


def invoke(
    handler: LambdaHandler, event: object, context: FakeLambdaContext | None = None
) -> dict[str, Any]:
    return handler(event, context or FakeLambdaContext())


@dataclass
class DeployedFunctions:
    """Functions that share one test's world, each invoked with its own environment."""

    environments: dict[str, dict[str, str]]  # function logical id -> its environment
    monkeypatch: pytest.MonkeyPatch
    # The function whose container this process plays now: a container reads its settings
    # once, so invoking another function starts a new container.
    container_of: str | None = field(default=None, kw_only=True)
    container: Container = field(default_factory=Container, kw_only=True)
    _handlers: dict[int, LambdaHandler] = field(default_factory=dict, kw_only=True)  # by id(app)

    def invoke(self, app: ModuleType, function: FunctionDecl, event: object) -> dict[str, Any]:
        """Invoke ``function``'s handler with its environment as deployed, in a container of
        its own."""
        if self.container_of != function.logical_id:
            self.close()
            self.container = Container()
            self.container_of = function.logical_id
        set_environment(self.monkeypatch, self.environments[function.logical_id])
        handler = self._handlers.get(id(app))
        if handler is None:
            handler = self._handlers[id(app)] = app.make_handler(self.container)
        return invoke(handler, event, lambda_context(function))

    @property
    def runtime(self) -> Runtime:
        """The meta store and object store of the container this process plays now."""
        return self.container.runtime

    def close(self) -> None:
        """End the container this process plays (and forget the handlers made over it)."""
        self.container.close()
        self._handlers.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def failures(response: Mapping[str, Any]) -> list[str]:
    """The message ids a batch response reports failed."""
    return sorted(item["itemIdentifier"] for item in response["batchItemFailures"])


def emitted_metrics(output: str) -> list[dict[str, Any]]:
    """The EMF documents Powertools printed (one per invocation)."""
    return [
        json.loads(line)
        for line in output.splitlines()
        if line.startswith("{") and '"_aws"' in line
    ]


def schedule_event(function: FunctionDecl) -> object:
    """What the template's schedule invokes ``function`` with."""
    (schedule,) = function.schedules
    assert schedule.input is not None
    return json.loads(schedule.input)


# -- the lake ----------------------------------------------------------------------------------


def insert_small_batches(table: str = "events", *, batches: int = BATCHES, rows: int = 60) -> None:
    """``batches`` inserts, each writing one small file into each of ``DAYS`` day partitions,
    through a container built from the environment."""
    with Container() as container:
        runtime = container.runtime
        inserter = Inserter(meta=runtime.meta, objects=runtime.objects)
        try:
            for b in range(batches):
                inserter.insert_rows(
                    table,
                    [
                        {
                            "ts": f"2026-05-0{1 + i % DAYS}T{i % 24:02d}:{b:02d}:00Z",
                            "event": ("view", "click", "buy")[(i + b) % 3],
                            "user_id": f"u{(i * 7 + b) % 13}",
                        }
                        for i in range(rows)
                    ],
                )
        finally:
            inserter.close()


def merge_until_quiet(table: str = "events") -> None:
    """Merge until the planner finds nothing: the inputs stay in S3, dead in the meta store."""
    with Container() as container:
        runtime = container.runtime
        settings = runtime.settings
        worker = MergeWorker(
            meta=runtime.meta,
            objects=runtime.objects,
            configure=lambda con: configure_s3_from_settings(con, settings),
        )
        report = merge_locally(meta=runtime.meta, worker=worker, table=table, until_quiet=True)
    assert report.dead_letters == ()
