"""What a million events cost (issue 37), measured end to end under moto, not estimated.

The deployed functions' handlers run as the stack wires them, with their environments built
from ``template.yaml``, against one moto server (S3 and SQS over HTTP, so DuckDB's and boto3's
requests alike reach it) and a real Postgres:

1. **ingest and merge**: one day of sample events is sent to the insert queue in envelopes of
   ``envelope`` events (ten messages per ``SendMessageBatch``), a batching window's worth at a
   time, and the insert function is invoked as its event source mapping would: each invocation
   gets what the window gathered (``gathered`` messages), then the messages it did not fail
   are deleted. Every ``merge_every`` invocations the scheduled orchestrator runs and the merge
   worker is invoked once per task (its batch size is one), as the 5-minute schedule would
   with a 30-second window; at the end, merges run until the orchestrator plans nothing;
2. **janitor**: one scheduled run;
3. **queries**: ``queries`` invocations of the query function, a mix of a one-hour aggregate,
   one user's events and a full-range aggregate.

A WSGI layer in front of moto counts every request by service and operation. Each
invocation's duration times its function's configured memory gives its GB-seconds. Priced at
the us-east-1 list prices below (the README's), the result is the cost per million events
ingested and merged, per thousand queries, and per GB-month stored. The meta store is a
fixed monthly cost, listed apart. ``benchmarks/results/cost.json`` (``cost-small.json`` at
small scale).

A test (tests/lambda/test_cost_bench.py) runs the tiny scenario with moto's own request
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
from icefloe.spec import TableSpec
from icefloe.spec.presets import segment
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
from support.segment_corpus import segment_events
from support.template import FunctionDecl, import_handler_module

SCALES: dict[str, dict[str, int]] = {
    "tiny": {"events": 6_000, "envelope": 100, "gathered": 10, "merge_every": 3, "queries": 6},
    "small": {"events": 100_000, "envelope": 100, "gathered": 35, "merge_every": 10, "queries": 30},
    "full": {
        "events": 1_000_000,
        "envelope": 100,
        "gathered": 35,
        "merge_every": 10,
        "queries": 100,
    },
}

# us-east-1 list prices, November 2026 (the README's cost section uses the same).
PRICES = {
    "lambda_gb_second": 0.0000166667,
    "lambda_request": 0.20 / 1e6,
    "s3_tier1_request": 0.005 / 1000,  # S3_TIER1
    "s3_tier2_request": 0.0004 / 1000,  # GET, HEAD and the rest but DELETE (free)
    "sqs_request": 0.40 / 1e6,  # each 64 KiB of a request's payload counts as one
    "secrets_manager_call": 0.05 / 10_000,
    "s3_gb_month": 0.023,
}
# What S3 prices as PUT, COPY, POST and LIST (classify counts a copy as the PUT it is).
S3_TIER1 = frozenset({"PUT", "POST", "LIST", "DeleteObjects"})
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
    """A moto server whose every request is counted by :func:`classify`, under the phase
    the driver is in (``phase``)."""

    def __init__(self) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        self.phase = "setup"
        self.counts: Counter[tuple[str, str, str]] = Counter()  # phase, service, operation
        self.payload_chunks: Counter[str] = Counter()  # per phase: SQS's 64 KiB chunks
        moto_app = DomainDispatcherApplication(create_backend_app)
        counts, chunks, lock = self.counts, self.payload_chunks, threading.Lock()

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
            phase = self.phase
            body = b"".join(moto_app(environ, start_response))
            with lock:
                counts[(phase, service, operation)] += 1
                if service == "sqs":
                    # SQS bills each 64 KiB of a payload (sent or received) as a request.
                    size = max(int(environ.get("CONTENT_LENGTH") or 0), len(body))
                    chunks[phase] += max(1, -(-size // (64 * 1024)))
            return [body]

        self._server = make_server("127.0.0.1", 0, counted, threaded=True)
        self._loop = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._loop.start()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def totals(self) -> Counter[tuple[str, str]]:
        """Requests by service and operation, every phase together."""
        out: Counter[tuple[str, str]] = Counter()
        for (_, service, operation), n in self.counts.items():
            out[(service, operation)] += n
        return out

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
    moto: CountingMoto | None = None
    phase: str = "setup"
    gb_seconds: dict[tuple[str, str], float] = field(default_factory=dict)  # phase, function
    invocations: Counter[tuple[str, str]] = field(default_factory=Counter)

    def enter(self, phase: str) -> None:
        """Charge what follows (requests, invocations) to ``phase``."""
        self.phase = phase
        if self.moto is not None:
            self.moto.phase = phase

    def call(self, function: FunctionDecl, event: object) -> dict[str, Any]:
        """Invoke ``function`` and charge its duration times its memory."""
        app = self.apps.get(function.logical_id)
        if app is None:
            app = self.apps[function.logical_id] = import_handler_module(function)
        started = time.perf_counter()
        response = self.invoke(app, function, event)
        seconds = time.perf_counter() - started
        key = (self.phase, function.logical_id)
        gb = seconds * (function.memory_size or 128) / 1024
        self.gb_seconds[key] = self.gb_seconds.get(key, 0.0) + gb
        self.invocations[key] += 1
        return response

    def queue_of(self, function: FunctionDecl) -> CreatedQueue:
        (source,) = function.sqs_events
        return self.queues[source.queue]


@contextmanager
def deployed(
    moto: CountingMoto,
    dsn: str,
    schema: str,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    spec: TableSpec,
    quiet: bool,
) -> Iterator[Stack]:
    use_fake_aws(monkeypatch, session_token=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto.endpoint)
    if quiet:
        # Read when a handler module is imported (its Logger), before any invocation's
        # environment; it sets the level of the core's logger for the rest of the process.
        monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "WARNING")
    s3 = boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1")
    sqs = boto3.client("sqs", endpoint_url=moto.endpoint, region_name="us-east-1")
    unique = uuid.uuid4().hex[:8]
    bucket = create_bucket(s3, TEMPLATE, f"icefloe-cost-{unique}")
    queues = create_queues(sqs, TEMPLATE, name_prefix=f"c{unique}-")
    resources = {"DataBucket": bucket, **{name: q.url for name, q in queues.items()}}
    with MetaStore(dsn, schema=schema) as meta:
        meta.migrate()
        meta.create_table(spec)
    deployment = Deployment(postgres_dsn=dsn, schema_name=schema, home=home)
    environments = {
        f.logical_id: deployment.environment(
            f, resources=resources, s3_endpoint=moto.endpoint, memory_size=True
        )
        for f in (INSERT, ORCHESTRATOR, WORKER, JANITOR, QUERY)
    }
    for environment in environments.values():
        if quiet:
            environment["POWERTOOLS_LOG_LEVEL"] = "WARNING"
    with Stack(
        environments=environments, monkeypatch=monkeypatch, sqs=sqs, queues=queues, moto=moto
    ) as stack:
        yield stack


# -- the phases --------------------------------------------------------------------------------


def table_spec(scale: Mapping[str, int]) -> TableSpec:
    """The sample events' table, or with ``segment`` the Segment preset's."""
    return segment(TABLE) if scale.get("segment") else sample_events_spec(TABLE)


def event_stream(scale: Mapping[str, int]) -> Iterator[Mapping[str, object]]:
    """One day of sample events in time order, or with ``segment`` Segment Spec events (with
    their context objects, properties and traits; over three days, out of order)."""
    if not scale.get("segment"):
        yield from iter_sample_events(scale["events"], days=1)
        return
    for seed in range(-(-scale["events"] // 1000)):
        yield from segment_events(seed, min(1000, scale["events"] - seed * 1000))


def ingest(stack: Stack, scale: Mapping[str, int]) -> tuple[int, int, int]:
    """Send every event in envelopes, then drain the insert queue as the event source mapping
    would, the scheduled merges running after every ``merge_every`` insert invocations (0:
    only once the queue is empty), then until quiet; returns the events committed and the
    merges, and the bytes of JSON sent."""
    queue = stack.queue_of(INSERT)
    envelope, events = scale["envelope"], scale["events"]
    rows: list[Mapping[str, object]] = []
    bodies = []
    for event in event_stream(scale):
        rows.append(event)
        if len(rows) == envelope:
            bodies.append(json.dumps({"table": TABLE, "rows": rows}, default=str))
            rows = []
    if rows:
        bodies.append(json.dumps({"table": TABLE, "rows": rows}, default=str))
    stack.enter("ingest")
    merges = inserts = 0
    gathered = scale["gathered"]
    # Events arrive as the window gathers them: the queue never holds more than one window's
    # messages (moto's SQS slows down with every message a queue holds).
    windows = [bodies[start : start + gathered] for start in range(0, len(bodies), gathered)]
    while windows or (messages := receive(stack.sqs, queue.url, limit=gathered)):
        if windows:
            send_messages(stack.sqs, queue.url, windows.pop(0))
            messages = receive(stack.sqs, queue.url, limit=gathered)
        response = stack.call(INSERT, sqs_event(messages, queue))
        delete_succeeded(stack.sqs, queue.url, messages, response)
        if response["batchItemFailures"]:
            raise RuntimeError(f"insert failed messages: {response['batchItemFailures']}")
        inserts += 1
        if scale["merge_every"] and inserts % scale["merge_every"] == 0:
            stack.enter("merge")
            merges += merge_round(stack)
            stack.enter("ingest")
    stack.enter("merge")
    merges += merge(stack)
    return events, merges, sum(len(body) for body in bodies)


def merge_round(stack: Stack) -> int:
    """One scheduled orchestrator run, and a worker invocation per task it sent (the worker's
    batch size is one); returns the merges."""
    queue = stack.queue_of(WORKER)
    stack.call(ORCHESTRATOR, schedule_event(ORCHESTRATOR))
    merges = 0
    while messages := receive(stack.sqs, queue.url, limit=1):
        response = stack.call(WORKER, sqs_event(messages, queue))
        delete_succeeded(stack.sqs, queue.url, messages, response)
        if response["batchItemFailures"]:
            raise RuntimeError(f"a merge failed: {response['batchItemFailures']}")
        merges += 1
    return merges


def merge(stack: Stack) -> int:
    """Merge rounds until the orchestrator plans nothing; returns the merges."""
    merges = 0
    for _ in range(20):
        sent = merge_round(stack)
        if not sent:
            return merges
        merges += sent
    raise RuntimeError("merging did not settle in 20 rounds")


QUERY_MIX = (
    "SELECT event, count(*) AS n FROM events WHERE ts >= TIMESTAMP '2026-11-01 09:00'"
    " AND ts < TIMESTAMP '2026-11-01 10:00' GROUP BY event ORDER BY event",
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
    counts: Mapping[tuple[str, str], int], sqs_chunks: int, gb_s: float, calls: int
) -> dict[str, float]:
    s3 = {op: n for (service, op), n in counts.items() if service == "s3"}
    s3_tier1 = sum(n for op, n in s3.items() if op in S3_TIER1)
    s3_tier2 = sum(n for op, n in s3.items() if op not in S3_TIER1 and op != "DELETE")
    secrets = sum(n for (service, _), n in counts.items() if service == "secretsmanager")
    parts = {
        "lambda": gb_s * PRICES["lambda_gb_second"] + calls * PRICES["lambda_request"],
        "s3_requests": s3_tier1 * PRICES["s3_tier1_request"]
        + s3_tier2 * PRICES["s3_tier2_request"],
        "sqs": sqs_chunks * PRICES["sqs_request"],
        "secrets_manager": secrets * PRICES["secrets_manager_call"],
    }
    parts["total"] = sum(parts.values())
    return {k: round(v, 8) for k, v in parts.items()}


@dataclass
class Phase:
    name: str
    requests: Counter[tuple[str, str]]
    sqs_chunks: int
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
            "sqs_64k_chunks": self.sqs_chunks,
            "gb_seconds": {k: round(v, 3) for k, v in self.gb_seconds.items()},
            "invocations": dict(self.invocations),
            "cost_usd": self.cost(),
        }


def run(
    scale: Mapping[str, int], *, dsn: str, home: Path, moto: CountingMoto, quiet: bool = False
) -> dict[str, Any]:
    """Every phase against ``moto``; per phase its requests, GB-seconds and cost. ``quiet``:
    the functions log warnings only (for the command line; it changes the process's logging
    for good)."""
    schema = f"cost_{uuid.uuid4().hex[:8]}"
    counted_before, chunks_before = Counter(moto.counts), Counter(moto.payload_chunks)
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        deployed(
            moto, dsn, schema, home, monkeypatch, spec=table_spec(scale), quiet=quiet
        ) as stack,
    ):
        events, merges, sent_bytes = ingest(stack, scale)
        stack.enter("janitor")
        stack.call(JANITOR, schedule_event(JANITOR))
        stack.enter("queries")
        query(stack, scale["queries"])
        stack.enter("setup")
        phases = [
            Phase(
                name=name,
                requests=Counter(
                    {
                        (s, o): n - counted_before[(p, s, o)]
                        for (p, s, o), n in moto.counts.items()
                        if p == name and n > counted_before[(p, s, o)]
                    }
                ),
                sqs_chunks=moto.payload_chunks[name] - chunks_before[name],
                gb_seconds={f: v for (p, f), v in stack.gb_seconds.items() if p == name},
                invocations={f: n for (p, f), n in stack.invocations.items() if p == name},
            )
            for name in ("ingest", "merge", "janitor", "queries")
        ]
    with MetaStore(dsn, schema=schema) as meta:
        live = meta.files(TABLE)
    if sum(f.row_count for f in live) != events:
        raise RuntimeError(f"{sum(f.row_count for f in live)} rows live, {events} events sent")
    stored_bytes = sum(f.size_bytes for f in live)
    by_name = {p.name: p for p in phases}
    per_million = 1e6 / events
    ingest_and_merge = {
        k: round((by_name["ingest"].cost()[k] + by_name["merge"].cost()[k]) * per_million, 6)
        for k in by_name["ingest"].cost()
    }
    return {
        "events": events,
        "json_bytes_per_event": round(sent_bytes / events),
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


# What moves the cost per million events: each knob changed alone from the small scenario.
KNOBS: dict[str, dict[str, int]] = {
    "envelopes of 10 events (not 100)": {"envelope": 10},
    "the batching window gathers 5 messages (not 35)": {"gathered": 5},
    "the batching window gathers 350 messages": {"gathered": 350},
    "merges only after the last insert (not every 10 inserts)": {"merge_every": 0},
    "merges after every 2 inserts": {"merge_every": 2},
    "Segment Spec events (not the sample events)": {"segment": 1, "queries": 0},
}


def knob_effects(*, dsn: str, home: Path, moto: CountingMoto) -> dict[str, Any]:
    """Per knob, the cost per million events with it changed (and the events' size), beside
    the small scenario's."""

    def measured(scale: Mapping[str, int], home: Path) -> dict[str, Any]:
        result = run(scale, dsn=dsn, home=home, moto=moto, quiet=True)
        return {
            "usd": result["per_million_events_usd"],
            "json_bytes_per_event": result["json_bytes_per_event"],
        }

    out = {"small scenario": measured(SCALES["small"], home / "base")}
    for n, (name, change) in enumerate(KNOBS.items()):
        out[name] = measured({**SCALES["small"], **change}, home / f"knob{n}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument(
        "--knobs",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="then run the small scenario with each knob of KNOBS changed, and record the"
        " cost per million events of each",
    )
    args = parser.parse_args()
    scale = SCALES[args.scale]
    knobs = bool(args.knobs)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto = CountingMoto()
    try:
        with benchmark_postgres() as dsn, tempfile.TemporaryDirectory() as tmp:
            result = run(scale, dsn=dsn, home=Path(tmp) / "run", moto=moto, quiet=True)
            if knobs:
                result["knobs_per_million_events_usd"] = knob_effects(
                    dsn=dsn, home=Path(tmp), moto=moto
                )
    finally:
        moto.stop()
    name = "cost" if args.scale == "full" else f"cost-{args.scale}"
    path = write_results(name, {"scale": args.scale, **scale, **result})
    print(json.dumps(result["per_million_events_usd"]), flush=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
