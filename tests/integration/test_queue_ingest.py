"""Queue ingestion: one commit per table per batch, bad messages isolated, redeliveries once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from icefloe.ingest import Inserter
from icefloe.ingest.queue import QueueMessage, insert_queue_messages
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore

pytestmark = pytest.mark.integration


@pytest.fixture
def inserter(meta: MetaStore, tmp_path: Path) -> Iterator[Inserter]:
    for name in ("events", "other"):
        meta.create_table(
            TableSpec.create(
                name=name,
                schema="ts TIMESTAMP NOT NULL, event VARCHAR NOT NULL, user_id VARCHAR",
                partition_by="day(ts)",
            )
        )
    ins = Inserter(meta=meta, objects=LocalObjectStore(tmp_path / "warehouse"))
    yield ins
    ins.close()


def event(i: int) -> str:
    return json.dumps({"ts": f"2026-05-0{1 + i % 3}T00:00:00Z", "event": "e", "user_id": f"u{i}"})


def messages(n: int, *, prefix: str = "m") -> list[QueueMessage]:
    return [QueueMessage(message_id=f"{prefix}{i}", body=event(i)) for i in range(n)]


def test_a_batch_with_three_bad_messages_commits_the_rest_once(
    inserter: Inserter, meta: MetaStore
) -> None:
    batch = messages(100)
    batch[10] = QueueMessage("m10", "{not json")
    batch[50] = QueueMessage("m50", "[1, 2]")
    batch[90] = QueueMessage("m90", json.dumps({"ts": "2026-05-01", "event": 7}))

    outcome = insert_queue_messages(inserter, batch, default_table="events")

    assert sorted(outcome.failed_message_ids) == ["m10", "m50", "m90"]
    assert "not JSON" in outcome.failed["m10"]
    assert (
        "field 'event'" in outcome.failed["m90"] and "row 0 of the message" in outcome.failed["m90"]
    )
    assert len(outcome.commits) == 1 and outcome.commits[0].rows == 97
    assert len(meta.snapshots("events")) == 1 and meta.status("events").rows == 97


def test_a_redelivered_batch_commits_nothing_new_however_it_is_regrouped(
    inserter: Inserter, meta: MetaStore
) -> None:
    first = messages(20)
    insert_queue_messages(inserter, first, default_table="events")

    again = insert_queue_messages(inserter, first, default_table="events")
    assert again.commits == () and sorted(again.already_committed) == sorted(
        m.message_id for m in first
    )

    regrouped = first[:10] + messages(5, prefix="new")
    outcome = insert_queue_messages(inserter, regrouped, default_table="events")
    assert [c.rows for c in outcome.commits] == [5]
    assert len(outcome.already_committed) == 10
    assert meta.status("events").rows == 25


def test_envelopes_and_attributes_route_rows_to_their_tables(
    inserter: Inserter, meta: MetaStore
) -> None:
    batch = [
        QueueMessage(
            "a", json.dumps({"table": "other", "rows": [json.loads(event(i)) for i in range(4)]})
        ),
        QueueMessage("b", event(1), table="other"),
        QueueMessage("c", event(2)),
    ]
    outcome = insert_queue_messages(inserter, batch, default_table="events")
    assert outcome.failed == {}
    assert sorted((c.table, c.rows) for c in outcome.commits) == [("events", 1), ("other", 5)]


@pytest.mark.parametrize(
    ("body", "table", "reason"),
    [
        (json.dumps({"table": "nope", "rows": [{"ts": "2026-05-01", "event": "e"}]}), None, "nope"),
        (
            json.dumps({"table": "../x", "rows": [{"ts": "2026-05-01", "event": "e"}]}),
            None,
            "table name",
        ),
        (json.dumps({"table": "events", "rows": []}), None, "non-empty list"),
        (json.dumps({"table": "events", "rows": [1]}), None, "not a JSON object"),
        (json.dumps({"ts": "2026-05-01", "event": "e"}), "", "no table for this event"),
    ],
)
def test_undeliverable_messages_fail_with_a_reason(
    inserter: Inserter, body: str, table: str | None, reason: str
) -> None:
    default = None if table == "" else "events"
    outcome = insert_queue_messages(
        inserter, [QueueMessage("bad", body), *messages(3)], default_table=default
    )
    assert list(outcome.failed) == ["bad"] + ([] if default else ["m0", "m1", "m2"])
    assert reason in outcome.failed["bad"]


@pytest.mark.parametrize("value", ["é" * 200, "x" * 300, "k" * 1000])
def test_a_partition_value_too_long_to_store_fails_only_its_message(
    meta: MetaStore, tmp_path: Path, value: str
) -> None:
    # Given a table partitioned by a tenant column, and a message whose tenant escapes to a
    # path segment longer than a file name may be (or a key longer than S3 allows)
    meta.create_table(
        TableSpec.create(
            name="tenants",
            schema="ts TIMESTAMP NOT NULL, tenant VARCHAR",
            partition_by="identity(tenant), day(ts)",
        )
    )
    inserter = Inserter(meta=meta, objects=LocalObjectStore(tmp_path / "warehouse"))
    try:
        batch = [
            QueueMessage(f"m{i}", json.dumps({"ts": "2026-05-01", "tenant": tenant}))
            for i, tenant in enumerate(["a", value, "b"])
        ]
        # When the batch is inserted
        outcome = insert_queue_messages(inserter, batch, default_table="tenants")
    finally:
        inserter.close()
    # Then that message alone fails, naming its row and field, and its neighbours commit
    assert list(outcome.failed) == ["m1"]
    assert "row 0 of the message" in outcome.failed["m1"]
    assert "field 'tenant'" in outcome.failed["m1"] and "partition path" in outcome.failed["m1"]
    assert [c.rows for c in outcome.commits] == [2]
    assert meta.status("tenants").rows == 2


def test_a_message_giving_a_key_twice_fails_alone_naming_the_key(
    inserter: Inserter, meta: MetaStore
) -> None:
    ts = '"ts": "2026-05-01T10:00:00Z"'
    batch = [
        QueueMessage("top", f'{{{ts}, "event": "e", "event": "f"}}'),
        QueueMessage("inner", f'{{{ts}, "event": "e", "user_id": {{"x": 1, "x": 2}}}}'),
        QueueMessage(
            "enveloped",
            f'{{"table": "events", "rows": [{{{ts}, "event": "e"}}, {{{ts}, "event": "e",'
            f' "user_id": "u", "user_id": "v"}}]}}',
        ),
        # The repeated member's ':' is made up by an escaped one: still found.
        QueueMessage("escaped", f'{{{ts}, "event": "\\u003a", "event": "e"}}'),
        # Escaped and literal colons in values and keys, no key repeated: inserted.
        QueueMessage("colons", f'{{{ts}, "event": "a:\\u003A:b", "user_id": "{{\\"k:\\": 1}}"}}'),
        *messages(2),
    ]
    outcome = insert_queue_messages(inserter, batch, default_table="events")
    assert outcome.failed == {
        "top": "message body gives the key 'event' twice in one object",
        "inner": "message body gives the key 'x' twice in one object",
        "enveloped": "message body gives the key 'user_id' twice in one object",
        "escaped": "message body gives the key 'event' twice in one object",
    }
    assert [c.rows for c in outcome.commits] == [3]
    assert meta.status("events").rows == 3


@pytest.mark.parametrize(("depth", "named"), [(300, True), (1_020, False)])
def test_a_key_given_twice_deep_in_a_message_is_found(
    inserter: Inserter, depth: int, named: bool
) -> None:
    # Given a message nesting past what orjson prints (254 levels), or past what Python's
    # parser reads (but within orjson's 1,024), with a key given twice at the bottom
    nested = '{"k": 1, "k": 2}'
    for _ in range(depth - 1):
        nested = "[" + nested + "]"
    deep = f'{{"ts": "2026-05-01T10:00:00Z", "event": "e", "user_id": {nested}}}'
    clean = deep.replace('"k": 1, "k": 2', '"k": 1, "j": 2')
    batch = [QueueMessage("deep", deep), QueueMessage("clean", clean), *messages(1)]
    outcome = insert_queue_messages(inserter, batch, default_table="events")
    # Then that message fails for it (naming the key when Python's parser can reach it); the
    # same message without the repeat fails only for its type
    key = "the key 'k'" if named else "a key"
    assert outcome.failed["deep"] == f"message body gives {key} twice in one object"
    assert "given twice" not in outcome.failed["clean"] and "user_id" in outcome.failed["clean"]
    assert [c.rows for c in outcome.commits] == [1]
