"""The cost benchmark counts what moto served: at its smallest scale, with moto's own request
recorder on, its counts of S3 and SQS requests by operation are moto's log's, request for
request, and every phase is priced from them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from benchmarks.cost_bench import PRICES, SCALES, CountingMoto, classify, run

pytestmark = pytest.mark.e2e


def test_the_request_counts_are_motos_own_log(
    postgres_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.moto_api import recorder

    # Given moto's recorder logging every request it serves to a file of this test's
    monkeypatch.setattr(recorder, "_location", str(tmp_path / "moto_recording"))
    moto = CountingMoto()
    recorder.start_recording()
    try:
        # When the benchmark runs its smallest scenario
        result = run(SCALES["tiny"], dsn=postgres_dsn, home=tmp_path / "home", moto=moto)
    finally:
        recorder.stop_recording()
        moto.stop()

    # Then the requests it counted, by service and operation, are those moto logged
    logged: Counter[tuple[str, str]] = Counter()
    for line in (tmp_path / "moto_recording").read_text().splitlines():
        entry = json.loads(line)
        url = urlsplit(entry["url"])
        logged[classify(entry["method"], url.path, url.query, entry["headers"])] += 1
    assert moto.totals() == logged
    # And each phase's counts are its share of them
    phased: Counter[str] = Counter()
    for phase in result["phases"].values():
        for operation, n in phase["requests"].items():
            phased[operation] += n
    setup = {f"{s}:{o}" for (s, o) in logged} - set(phased)
    assert setup <= {
        "s3:PUT",
        "sqs:CreateQueue",
        "sqs:GetQueueAttributes",
        "sqs:SetQueueAttributes",
        "sqs:GetQueueUrl",
    }, setup
    for operation, n in phased.items():
        service, _, name = operation.partition(":")
        assert n <= logged[(service, name)], operation
    # And the scenario did what it says: inserts put files, a merge read and wrote them,
    # queries read them, and SQS carried the envelopes and the merge task
    ingest, merge, queries = (
        result["phases"][p]["requests"] for p in ("ingest", "merge", "queries")
    )
    assert ingest["s3:PUT"] == result["phases"]["ingest"]["invocations"]["InsertFunction"]
    assert ingest["sqs:SendMessageBatch"] == -(-SCALES["tiny"]["events"] // 100 // 10)
    assert result["merges"] >= 1 and merge["s3:GET"] >= 1 and merge["s3:PUT"] >= 1
    assert queries.get("s3:GET", 0) >= 1
    # And the price per million events is the phases' costs scaled, each part from its counts
    ingest_cost = result["phases"]["ingest"]["cost_usd"]
    assert ingest_cost["s3_requests"] == pytest.approx(
        ingest["s3:PUT"] * PRICES["s3_tier1_request"]
        + ingest.get("s3:HEAD", 0) * PRICES["s3_tier2_request"]
        + ingest.get("s3:GET", 0) * PRICES["s3_tier2_request"],
        abs=1e-8,
    )
    total = (
        result["phases"]["ingest"]["cost_usd"]["total"]
        + result["phases"]["merge"]["cost_usd"]["total"]
    )
    assert result["per_million_events_usd"]["total"] == pytest.approx(
        total * 1e6 / result["events"], rel=1e-3
    )
