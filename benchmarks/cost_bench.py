"""What a million events cost (issue 37), measured end to end under moto, not estimated.

The deployed functions' handlers run as the stack wires them, with their environments built
from ``template.yaml``, against one moto server (S3 and SQS over HTTP, so DuckDB's and boto3's
requests alike reach it) and a real Postgres:

1. **ingest**: events are sent to the insert queue in envelopes of ``envelope`` events (ten
   messages per ``SendMessageBatch``), and the insert function is invoked as its event source
   mapping would: each invocation gets what the batching window gathers (``gathered``
   messages), then the messages it did not fail are deleted;
2. **merge**: the scheduled orchestrator runs, the merge worker is invoked once per task (its
   batch size is one), until the orchestrator plans nothing;
3. **janitor**: one scheduled run;
4. **queries**: ``queries`` invocations of the query function, a mix of a one-day aggregate, a
   point lookup and a full-range aggregate.

A WSGI layer in front of moto counts every request by service and operation. Each
invocation's duration times its function's configured memory gives its GB-seconds. Priced at
the us-east-1 list prices below (the README's), the result is the cost per million events
ingested and merged, per thousand queries, and per GB-month stored. The meta store is a
fixed monthly cost, listed apart. ``benchmarks/results/cost.json`` (``cost-small.json`` at
small scale).

A test (tests/lambda/test_cost_bench.py) runs the small scenario with moto's own request
recorder on and checks these counts against moto's log.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs

import boto3
import pytest

from benchmarks.common import benchmark_postgres, write_results
from icefloe.metastore.store import MetaStore
from icefloe.sample_events import iter_sample_events, sample_events_spec
from support.aws import (
    CreatedQueue,
    create_bucket,
    create_queues,
    delete_succeeded,
    receive,
    send_messages,
    sqs_event,
)
from support.lambda_stack import (
    TEMPLATE,
    DeployedFunctions,
    Deployment,
    schedule_event,
    use_fake_aws,
)
from support.template import FunctionDecl, import_handler_module

SCALES: dict[str, dict[str, int]] = {
    "tiny": {"events": 6_000, "envelope": 100, "gathered": 10, "queries": 6},
    "small": {"events": 100_000, "envelope": 100, "gathered": 35, "queries": 30},
    "full": {"events": 1_000_000, "envelope": 100, "gathered": 35, "queries": 100},
}

# us-east-1 list prices, November 2026 (the README's cost section uses the same).
PRICES = {
    "lambda_gb_second": 0.0000166667,
    "lambda_request": 0.20 / 1e6,
    "s3_tier1_request": 0.005 / 1000,  # PUT, COPY, POST, LIST
    "s3_tier2_request": 0.0004 / 1000,  # GET, HEAD and the rest but DELETE
    "sqs_request": 0.40 / 1e6,  # each 64 KiB of a request's payload counts as one
    "secrets_manager_call": 0.05 / 10_000,
    "s3_gb_month": 0.023,
}
META_STORE_MONTHLY = 14.0  # RDS db.t4g.micro single-AZ with 20 GB, the README's figure
TABLE = "events"
FUNCTIONS = TEMPLATE.functions()
INSERT = FUNCTIONS["InsertFunction"]
ORCHESTRATOR = FUNCTIONS["MergeOrchestratorFunction"]
WORKER = FUNCTIONS["MergeWorkerFunction"]
JANITOR = FUNCTIONS["JanitorFunction"]
QUERY = FUNCTIONS["QueryFunction"]


# -- counting requests -------------------------------------------------------------------------


def classify(method: str, path: str, query: str, headers: Mapping[str, str]) -> tuple[str, str]:
    """A request's service and operation: ``("sqs", "SendMessageBatch")``, ``("s3", "GET")``.

    SQS speaks JSON (the operation in ``X-Amz-Target``) or the query protocol (``Action``);
    Secrets Manager JSON; everything else here is S3, named by its HTTP method, with listings
    (``list-type`` or a bucket GET) and batch deletes (``?delete``) apart."""
    target = headers.get("X-Amz-Target", "")
    if target.startswith("AmazonSQS."):
        return "sqs", target.split(".", 1)[1]
    if target.startswith("secretsmanager."):
        return "secretsmanager", target.split(".", 1)[1]
    params = parse_qs(query, keep_blank_values=True)
    if "Action" in params:
        return "sqs", params["Action"][0]
    key = path.lstrip("/").partition("/")[2]
    if method == "GET" and ("list-type" in params or not key):
        return "s3", "LIST"
    if method == "POST" and "delete" in params:
        return "s3", "DeleteObjects"
    return "s3", method


class CountingMoto:
    """A moto server whose every request is counted by :func:`classify` (thread-safe: the
    server handles one request at a time per thread, and Counter updates hold the GIL)."""

    def __init__(self) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        self.counts: Counter[tuple[str, str]] = Counter()
        self.payload_chunks: Counter[str] = Counter()  # SQS: 64 KiB chunks per request
        moto_app = DomainDispatcherApplication(create_backend_app)
        counts, chunks = self.counts, self.payload_chunks

        def counted(environ: dict[str, Any], start_response: Any) -> Any:
            path = environ.get("PATH_INFO", "")
            if path.startswith("/moto-api"):
                return moto_app(environ, start_response)
            headers = {
                key[5:].replace("_", "-").title(): value
                for key, value in environ.items()
                if key.startswith("HTTP_")
            }
            service, operation = classify(
                environ["REQUEST_METHOD"], path, environ.get("QUERY_STRING", ""), headers
            )
            counts[(service, operation)] += 1
            body = b"".join(moto_app(environ, start_response))
            if service == "sqs":
                # SQS bills each 64 KiB of a request's payload (sent or received) as a request.
                size = max(int(environ.get("CONTENT_LENGTH") or 0), len(body))
                chunks[operation] += max(1, -(-size // (64 * 1024)))
            return [body]

        self._server = make_server("127.0.0.1", 0, counted, threaded=True)
        self._loop = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._loop.start()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def snapshot(self) -> Counter[tuple[str, str]]:
        return Counter(self.counts)

    def stop(self) -> None:
        self._server.shutdown()
        self._loop.join()


# -- the stack ---------------------------------------------------------------------------------


@dataclass
class Stack(DeployedFunctions):
    """Every function's world on one bucket and the template's queues."""

    sqs: Any = None
    queues: dict[str, CreatedQueue] = field(default_factory=dict)
    apps: dict[str, ModuleType] = field(default_factory=dict)
    gb_seconds: dict[str, float] = field(default_factory=dict)
    invocations: Counter[str] = field(default_factory=Counter)

    def call(self, function: FunctionDecl, event: object) -> dict[str, Any]:
        """Invoke ``function`` and charge its duration times its memory."""
        app = self.apps.get(function.logical_id)
        if app is None:
            app = self.apps[function.logical_id] = import_handler_module(function)
        started = time.perf_counter()
        response = self.invoke(app, function, event)
        seconds = time.perf_counter() - started
        gb = seconds * (function.memory_size or 128) / 1024
        self.gb_seconds[function.logical_id] = self.gb_seconds.get(function.logical_id, 0.0) + gb
        self.invocations[function.logical_id] += 1
        return response

    def queue_of(self, function: FunctionDecl) -> CreatedQueue:
        (source,) = function.sqs_events
        return self.queues[source.queue]


@contextmanager
def deployed(
    moto: CountingMoto, dsn: str, schema: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Stack]:
    use_fake_aws(monkeypatch, session_token=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto.endpoint)
    # Read when a handler module is imported (its Logger), before any invocation's environment.
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "WARNING")
    s3 = boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1")
    sqs = boto3.client("sqs", endpoint_url=moto.endpoint, region_name="us-east-1")
    unique = uuid.uuid4().hex[:8]
    bucket = create_bucket(s3, TEMPLATE, f"icefloe-cost-{unique}")
    queues = create_queues(sqs, TEMPLATE, name_prefix=f"c{unique}-")
    resources = {"DataBucket": bucket, **{name: q.url for name, q in queues.items()}}
    with MetaStore(dsn, schema=schema) as meta:
        meta.migrate()
        meta.create_table(sample_events_spec(TABLE))
    deployment = Deployment(postgres_dsn=dsn, schema_name=schema, home=home)
    environments = {
        f.logical_id: deployment.environment(
            f, resources=resources, s3_endpoint=moto.endpoint, memory_size=True
        )
        for f in (INSERT, ORCHESTRATOR, WORKER, JANITOR, QUERY)
    }
    for environment in environments.values():
        environment["POWERTOOLS_LOG_LEVEL"] = "WARNING"
    with Stack(environments=environments, monkeypatch=monkeypatch, sqs=sqs, queues=queues) as stack:
        yield stack


# -- the phases --------------------------------------------------------------------------------


def ingest(stack: Stack, scale: Mapping[str, int]) -> int:
    """Send every event in envelopes, then drain the insert queue as the event source mapping
    would; returns the events committed."""
    queue = stack.queue_of(INSERT)
    envelope, events = scale["envelope"], scale["events"]
    rows: list[dict[str, object]] = []
    bodies = []
    for event in iter_sample_events(events, days=1):
        rows.append(event)
        if len(rows) == envelope:
            bodies.append(json.dumps({"table": TABLE, "rows": rows}, default=str))
            rows = []
    if rows:
        bodies.append(json.dumps({"table": TABLE, "rows": rows}, default=str))
    send_messages(stack.sqs, queue.url, bodies)
    while True:
        messages = receive(stack.sqs, queue.url, limit=scale["gathered"])
        if not messages:
            break
        response = stack.call(INSERT, sqs_event(messages, queue))
        delete_succeeded(stack.sqs, queue.url, messages, response)
        if response["batchItemFailures"]:
            raise RuntimeError(f"insert failed messages: {response['batchItemFailures']}")
    return events


def merge(stack: Stack) -> int:
    """Orchestrate and work the merge queue until nothing is planned; returns the merges."""
    queue = stack.queue_of(WORKER)
    merges = 0
    for _ in range(20):
        summary = stack.call(ORCHESTRATOR, schedule_event(ORCHESTRATOR))
        sent = 0
        while messages := receive(stack.sqs, queue.url, limit=1):
            response = stack.call(WORKER, sqs_event(messages, queue))
            delete_succeeded(stack.sqs, queue.url, messages, response)
            sent += 1
        merges += sent
        if not sent:
            return merges
        del summary
    raise RuntimeError("merging did not settle in 20 rounds")


QUERY_MIX = (
    "SELECT event, count(*) AS n FROM events WHERE ts >= TIMESTAMP '2026-11-02'"
    " AND ts < TIMESTAMP '2026-11-03' GROUP BY event ORDER BY event",
    "SELECT ts, event FROM events WHERE user_id = 'u42' ORDER BY ts LIMIT 20",
    "SELECT event, count(*) AS n, count(DISTINCT user_id) AS users FROM events GROUP BY event"
    " ORDER BY event",
)


def query(stack: Stack, count: int) -> None:
    for n in range(count):
        response = stack.call(QUERY, {"sql": QUERY_MIX[n % len(QUERY_MIX)], "max_rows": 100})
        if "error" in response:
            raise RuntimeError(f"query failed: {response}")


# -- pricing -----------------------------------------------------------------------------------


def price(
    counts: Mapping[tuple[str, str], int], chunks: Mapping[str, int], gb_s: float, calls: int
) -> dict[str, float]:
    s3_tier1 = sum(
        n
        for (service, op), n in counts.items()
        if service == "s3" and op in ("PUT", "POST", "LIST", "COPY", "DeleteObjects")
    )
    s3_tier2 = sum(
        n
        for (service, op), n in counts.items()
        if service == "s3" and op not in ("PUT", "POST", "LIST", "COPY", "DeleteObjects", "DELETE")
    )
    secrets = sum(n for (service, _), n in counts.items() if service == "secretsmanager")
    parts = {
        "lambda": gb_s * PRICES["lambda_gb_second"] + calls * PRICES["lambda_request"],
        "s3_requests": s3_tier1 * PRICES["s3_tier1_request"]
        + s3_tier2 * PRICES["s3_tier2_request"],
        "sqs": sum(chunks.values()) * PRICES["sqs_request"],
        "secrets_manager": secrets * PRICES["secrets_manager_call"],
    }
    parts["total"] = sum(parts.values())
    return {k: round(v, 8) for k, v in parts.items()}


@dataclass
class Phase:
    name: str
    requests: Counter[tuple[str, str]]
    sqs_chunks: Counter[str]
    gb_seconds: dict[str, float]
    invocations: dict[str, int]

    def cost(self) -> dict[str, float]:
        return price(
            self.requests,
            self.sqs_chunks,
            sum(self.gb_seconds.values()),
            sum(self.invocations.values()),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": {f"{s}:{o}": n for (s, o), n in sorted(self.requests.items())},
            "sqs_64k_chunks": sum(self.sqs_chunks.values()),
            "gb_seconds": {k: round(v, 3) for k, v in self.gb_seconds.items()},
            "invocations": dict(self.invocations),
            "cost_usd": self.cost(),
        }


def run(scale: Mapping[str, int], *, dsn: str, home: Path, moto: CountingMoto) -> dict[str, Any]:
    """Every phase against ``moto``; per phase its requests, GB-seconds and cost."""
    phases: list[Phase] = []
    schema = f"cost_{uuid.uuid4().hex[:8]}"
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        deployed(moto, dsn, schema, home, monkeypatch) as stack,
    ):

        def measured(name: str, work: Any) -> Any:
            requests, chunks = moto.snapshot(), Counter(moto.payload_chunks)
            gb, calls = dict(stack.gb_seconds), Counter(stack.invocations)
            out = work()
            phases.append(
                Phase(
                    name=name,
                    requests=moto.snapshot() - requests,
                    sqs_chunks=Counter(moto.payload_chunks) - chunks,
                    gb_seconds={
                        name: total - gb.get(name, 0.0)
                        for name, total in stack.gb_seconds.items()
                        if total > gb.get(name, 0.0)
                    },
                    invocations=dict(Counter(stack.invocations) - calls),
                )
            )
            return out

        events = measured("ingest", lambda: ingest(stack, scale))
        merges = measured("merge", lambda: merge(stack))
        measured("janitor", lambda: stack.call(JANITOR, schedule_event(JANITOR)))
        measured("queries", lambda: query(stack, scale["queries"]))
    with MetaStore(dsn, schema=schema) as meta:
        stored_bytes = sum(f.size_bytes for f in meta.files(TABLE))
    by_name = {p.name: p for p in phases}
    per_million = 1e6 / events
    ingest_and_merge = {
        k: round((by_name["ingest"].cost()[k] + by_name["merge"].cost()[k]) * per_million, 6)
        for k in by_name["ingest"].cost()
    }
    return {
        "events": events,
        "merges": merges,
        "phases": {p.name: p.to_json() for p in phases},
        "per_million_events_usd": ingest_and_merge,
        "per_thousand_queries_usd": round(
            by_name["queries"].cost()["total"] * 1000 / max(1, scale["queries"]), 4
        ),
        "stored_bytes_per_million_events": round(stored_bytes * per_million),
        "storage_usd_per_million_events_month": round(
            stored_bytes * per_million / 1e9 * PRICES["s3_gb_month"], 5
        ),
        "meta_store_usd_month": META_STORE_MONTHLY,
        "prices": PRICES,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto = CountingMoto()
    try:
        with benchmark_postgres() as dsn, tempfile.TemporaryDirectory() as tmp:
            result = run(scale, dsn=dsn, home=Path(tmp), moto=moto)
    finally:
        moto.stop()
    name = "cost" if args.scale == "full" else f"cost-{args.scale}"
    path = write_results(name, {"scale": args.scale, **scale, **result})
    print(json.dumps(result["per_million_events_usd"]), flush=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
