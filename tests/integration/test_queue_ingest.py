"""Queue ingestion: one commit per table per batch, bad messages isolated, redeliveries once."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from icefloe.errors import InvalidInputError
from icefloe.ingest import Inserter
from icefloe.ingest.queue import QueueMessage, insert_queue_messages, messages_from_sqs_records
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


@pytest.fixture
def fallback(meta: MetaStore) -> str:
    """A default table that keeps unknown fields: a message taken for one of its events
    commits whatever it holds (in the overflow column) instead of failing."""
    meta.create_table(
        TableSpec.create(
            name="fallback",
            schema="ts TIMESTAMP, event VARCHAR, extra JSON",
            extra_fields="keep",
            overflow_column="extra",
        )
    )
    return "fallback"


def rows_of(meta: MetaStore, table: str) -> int:
    return meta.status(table).rows if meta.snapshots(table) else 0


ENVELOPE_ROWS = [json.loads(event(i)) for i in range(2)]


@pytest.mark.parametrize(
    ("envelope", "reason"),
    [
        (
            {"table": "other", "rows": ENVELOPE_ROWS, "idempotency_key": "batch-1"},
            "envelope key 'idempotency_key' is not taken from the queue",
        ),
        (
            {"table": "other", "rows": ENVELOPE_ROWS, "extra": 1, "Table": "x"},
            "unknown envelope keys ['Table', 'extra']; expected 'table' and 'rows'",
        ),
        (
            {"Table": "other", "rows": ENVELOPE_ROWS},
            "message body spells envelope keys in another case: ['Table']",
        ),
        (
            {"TABLE": "other", "ROWS": ENVELOPE_ROWS},
            "message body spells envelope keys in another case: ['ROWS', 'TABLE']",
        ),
        (
            {"table": "other", "Rows": ENVELOPE_ROWS, "idempotency_key": None},
            "message body spells envelope keys in another case: ['Rows']",
        ),
    ],
    ids=["idempotency key", "unknown keys", "Table", "TABLE and ROWS", "Rows"],
)
def test_an_envelope_with_a_key_beyond_table_and_rows_fails_alone_naming_it(
    inserter: Inserter, meta: MetaStore, fallback: str, envelope: dict[str, object], reason: str
) -> None:
    # Given an envelope with a key it does not take (or its keys in another case), between two
    # good messages, and a default table that would keep anything as an event
    batch = [
        QueueMessage("a", event(0)),
        QueueMessage("bad", json.dumps(envelope)),
        QueueMessage("b", event(1)),
    ]
    # When the batch is inserted
    outcome = insert_queue_messages(inserter, batch, default_table=fallback)
    # Then that message fails, naming the key, rather than becoming an event of the default
    # table; its neighbours commit, once
    assert outcome.failed == {"bad": outcome.failed["bad"]} and reason in outcome.failed["bad"]
    assert [(c.table, c.rows) for c in outcome.commits] == [(fallback, 2)]
    assert rows_of(meta, "other") == 0 and rows_of(meta, fallback) == 2


def test_an_envelope_with_a_null_idempotency_key_is_taken_as_the_direct_invoke_takes_it(
    inserter: Inserter, meta: MetaStore, fallback: str
) -> None:
    envelope = {"table": "other", "rows": ENVELOPE_ROWS, "idempotency_key": None}
    batch = [QueueMessage("env", json.dumps(envelope)), QueueMessage("a", event(0))]
    outcome = insert_queue_messages(inserter, batch, default_table=fallback)
    assert outcome.failed == {}
    assert sorted((c.table, c.rows) for c in outcome.commits) == [(fallback, 1), ("other", 2)]


@pytest.mark.parametrize(
    "body",
    [
        {"table": "other", "row": ENVELOPE_ROWS},  # no 'rows': an event with a 'table' field
        {"Table": "other", "rows": ENVELOPE_ROWS, "ts": "2026-05-01T00:00:00Z"},  # more keys
    ],
    ids=["table without rows", "near miss with other keys"],
)
def test_an_object_that_is_no_envelope_stays_an_event(
    inserter: Inserter, meta: MetaStore, fallback: str, body: dict[str, object]
) -> None:
    outcome = insert_queue_messages(
        inserter, [QueueMessage("e", json.dumps(body))], default_table=fallback
    )
    assert outcome.failed == {} and [(c.table, c.rows) for c in outcome.commits] == [(fallback, 1)]


def sqs_record(message_id: str, body: str, attributes: object = None) -> dict[str, object]:
    record: dict[str, object] = {"messageId": message_id, "body": body, "eventSource": "aws:sqs"}
    if attributes is not None:
        record["messageAttributes"] = attributes
    return record


def string_attribute(value: object) -> dict[str, object]:
    return {"stringValue": value, "binaryValue": None, "dataType": "String"}


def test_an_unusable_table_attribute_fails_its_message_and_an_absent_one_means_the_default(
    inserter: Inserter, meta: MetaStore, fallback: str
) -> None:
    # Given records whose 'table' attribute is there but unusable, beside records without one
    # and one naming a table
    records = [
        sqs_record("empty", event(0), {"table": string_attribute("")}),
        sqs_record("number", event(1), {"table": {"stringValue": 5, "dataType": "Number"}}),
        sqs_record(
            "binary",
            event(2),
            {"table": {"stringValue": None, "binaryValue": "b3RoZXI=", "dataType": "Binary"}},
        ),
        sqs_record("not-an-attribute", event(3), {"table": "other"}),
        sqs_record("case", event(4), {"Table": string_attribute("other")}),
        sqs_record("odd-attributes", event(5), ["table"]),
        sqs_record("no-attributes", event(6)),
        sqs_record("empty-attributes", event(7), {}),
        sqs_record("other-attribute", event(8), {"trace": string_attribute("t")}),
        sqs_record("named", event(9), {"table": string_attribute("other")}),
    ]
    # When they are inserted
    outcome = insert_queue_messages(
        inserter, messages_from_sqs_records(records), default_table=fallback
    )
    # Then each unusable one fails by its id, saying why; the others go where they say
    assert outcome.failed == {
        "empty": "the 'table' message attribute is empty",
        "number": "the 'table' message attribute's 'stringValue' must be a string, not int",
        "binary": "the 'table' message attribute has no 'stringValue' (it is binary: send it"
        " with DataType 'String')",
        "not-an-attribute": "the 'table' message attribute is not an SQS message attribute (an"
        " object with 'stringValue')",
        "case": "message attribute 'Table' is not 'table' (attribute names are case-sensitive):"
        " send the table in the attribute 'table'",
        "odd-attributes": "the record's 'messageAttributes' is not an object",
    }
    assert sorted((c.table, c.rows) for c in outcome.commits) == [(fallback, 3), ("other", 1)]


def test_a_message_id_given_twice_with_one_body_commits_once_beside_its_neighbours(
    inserter: Inserter, meta: MetaStore
) -> None:
    # Given a batch in which SQS delivered the message D twice: [A, D, D, B]
    envelope = json.dumps({"table": "other", "rows": [json.loads(event(0))]})
    batch = [QueueMessage(m, envelope) for m in ("A", "D", "D", "B")]
    # When it is inserted
    outcome = insert_queue_messages(inserter, batch, default_table="events")
    # Then A, D and B commit, D once, in one commit
    assert outcome.failed == {}
    assert [(c.table, c.rows) for c in outcome.commits] == [("other", 3)]
    assert meta.status("other").rows == 3
    # And delivered again, all three are known as committed
    again = insert_queue_messages(inserter, batch, default_table="events")
    assert again.commits == () and sorted(again.already_committed) == ["A", "B", "D"]


def test_a_message_id_given_twice_with_different_bodies_fails_alone(
    inserter: Inserter, meta: MetaStore
) -> None:
    batch = [
        QueueMessage("A", event(0)),
        QueueMessage("D", event(1)),
        QueueMessage("D", event(2)),
        QueueMessage("D2", event(3), table="other"),
        QueueMessage("D2", event(3)),  # same body, another table
        QueueMessage("B", event(4)),
    ]
    outcome = insert_queue_messages(inserter, batch, default_table="events")
    assert outcome.failed == {
        "D": "the batch holds message 'D' 2 times, with different bodies or attributes",
        "D2": "the batch holds message 'D2' 2 times, with different bodies or attributes",
    }
    assert [(c.table, c.rows) for c in outcome.commits] == [("events", 2)]
    assert rows_of(meta, "other") == 0


def test_a_message_id_holding_nul_fails_alone(inserter: Inserter, meta: MetaStore) -> None:
    batch = [
        QueueMessage("A", event(0)),
        QueueMessage("N\x00", event(1)),
        QueueMessage("B", event(2)),
    ]
    outcome = insert_queue_messages(inserter, batch, default_table="events")
    assert outcome.failed == {"N\x00": "the message id holds NUL: it cannot be a receipt"}
    assert [c.rows for c in outcome.commits] == [2] and meta.status("events").rows == 2


@pytest.mark.parametrize(
    ("receipts", "reason"),
    [
        (["a", "b", "a"], "a commit names the receipt 'a' twice"),
        (["a", "n\x00"], "receipt 'n\\x00' holds NUL"),
    ],
)
def test_a_commit_refuses_receipts_it_cannot_record_naming_the_receipt(
    inserter: Inserter, meta: MetaStore, receipts: list[str], reason: str
) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(reason)):
        inserter.insert_rows("events", [json.loads(event(0))], receipts=receipts)
    assert meta.snapshots("events") == []
