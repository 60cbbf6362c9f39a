"""The functions' events: JSON Schemas as the contract, typed models, refusals naming the key.

The differential test checks the compiled validator and the models against the reference
implementation of JSON Schema (``jsonschema``) over random events: an event is accepted exactly
when the reference validator accepts it, so a schema compiled wrong, a rule checked in only one
place, or a model stricter than its schema fails it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefloe.aws.events import (
    SCHEMAS,
    InsertInvoke,
    JanitorInvoke,
    JobStateChange,
    OrchestratorInvoke,
    error_answer,
    load_schema,
    parse_query,
)
from icefloe.errors import BatchRejectedError, InvalidInputError, RowProblem
from icefloe.lifecycle import DeleteRequest
from icefloe.spec.names import InvalidNameError

PARSERS = {
    "insert": InsertInvoke.parse,
    "query": parse_query,
    "merge_orchestrator": OrchestratorInvoke.parse,
    "janitor": JanitorInvoke.parse,
}


@pytest.mark.parametrize("name", SCHEMAS)
def test_every_schema_is_a_valid_draft_2020_12_schema_with_examples(name: str) -> None:
    schema = load_schema(name)  # type: ignore[arg-type]
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["examples"]
    for example in schema["examples"]:
        jsonschema.Draft202012Validator(schema).validate(example)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_example_parses(name: str) -> None:
    for example in load_schema(name)["examples"]:  # type: ignore[arg-type]
        PARSERS[name](example)


def test_the_models_carry_typed_values() -> None:
    insert = InsertInvoke.parse({"table": "events", "rows": [{"a": 1}], "idempotency_key": "k"})
    assert insert == InsertInvoke(table="events", rows=[{"a": 1}], idempotency_key="k")
    query = parse_query({"sql": "SELECT 1", "as_of": "2026-05-01T10:00:00", "max_rows": 5.0})
    assert query.as_of == datetime(2026, 5, 1, 10, tzinfo=UTC) and query.max_rows == 5
    assert isinstance(query.max_rows, int)
    janitor = JanitorInvoke.parse({"retention": "1d12h", "dry_run": True, "max_files": 7})
    assert (janitor.retention, janitor.orphan_grace, janitor.dry_run, janitor.max_files) == (
        timedelta(hours=36),
        None,
        True,
        7,
    )
    delete = OrchestratorInvoke.parse({"delete": {"table": "events", "where": "n = 1"}})
    assert delete == OrchestratorInvoke(delete=DeleteRequest(table="events", where="n = 1"))
    assert OrchestratorInvoke.parse({"table": "events"}).table == "events"


_SCHEDULED = {
    "version": "0",
    "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2026-05-01T10:00:00Z",
    "region": "eu-west-1",
    "resources": ["arn:aws:events:eu-west-1:123456789012:rule/icefloe-janitor"],
    "detail": {},
}


@pytest.mark.parametrize(
    "event", [None, {}, _SCHEDULED, {"source": "aws.events", "detail-type": "Scheduled Event"}]
)
def test_the_schedule_means_every_table(event: object) -> None:
    assert OrchestratorInvoke.parse(event) == OrchestratorInvoke()
    assert JanitorInvoke.parse(event) == JanitorInvoke()


def test_a_direct_invoke_with_a_source_is_checked_not_taken_for_the_schedule() -> None:
    with pytest.raises(InvalidInputError, match=r"unknown event keys \['detail-type', 'source'\]"):
        JanitorInvoke.parse({"dry_run": True, "source": "me", "detail-type": "manual"})
    with pytest.raises(InvalidInputError, match=r"unknown event keys \['detail-type', 'source'\]"):
        OrchestratorInvoke.parse({"table": "events", "source": "me", "detail-type": "manual"})


@pytest.mark.parametrize(
    ("parse", "event", "message"),
    [
        (InsertInvoke.parse, [1], "event must be an object"),
        (InsertInvoke.parse, {"rows": []}, "event must have 'table'"),
        (InsertInvoke.parse, {"table": "t", "rows": {}}, "event 'rows' must be an array"),
        (InsertInvoke.parse, {"table": "t", "rows": [1]}, "event 'rows.0' must be an object"),
        (
            InsertInvoke.parse,
            {"table": "t", "rows": [], "idempotencyKey": "k"},
            "unknown event keys ['idempotencyKey']; expected ['idempotency_key', 'rows', 'table']",
        ),
        (InsertInvoke.parse, {"table": "t", "rows": [], "idempotency_key": 7}, "a string"),
        (parse_query, {"sql": "  "}, "request 'sql' must be a non-empty string"),
        (parse_query, {"sql": "SELECT 1", "format": "xml"}, "one of json, csv, parquet"),
        (parse_query, {"sql": "SELECT 1", "snapshot_id": 0}, "'snapshot_id' must be at least 1"),
        (parse_query, {"sql": "SELECT 1", "snapshot_id": True}, "a whole number or null"),
        (parse_query, {"sql": "SELECT 1", "max_rows": -1}, "'max_rows' must be at least 0"),
        (parse_query, {"sql": "SELECT 1", "snapshot_id": 2**63}, "must be at most 92233"),
        (parse_query, {"sql": "SELECT 1", "as_of": "yesterday"}, "ISO-8601"),
        (parse_query, {"query": "SELECT 1"}, "unknown request keys ['query']"),
        (
            parse_query,
            {"sql": "SELECT 1", "snapshot_id": 1, "as_of": "2026-05-01T10:00:00"},
            "request: give 'snapshot_id' or 'as_of', not both",
        ),
        (OrchestratorInvoke.parse, {"table": 5}, "event 'table' must be a string or null"),
        (
            OrchestratorInvoke.parse,
            {"table": "a", "delete": {"table": "a", "where": "true"}},
            "give 'table' or 'delete', not both",
        ),
        (OrchestratorInvoke.parse, {"delete": {"table": "a"}}, "'delete' must have 'where'"),
        (OrchestratorInvoke.parse, {"delete": {"table": "a", "where": ""}}, "non-empty"),
        (JanitorInvoke.parse, {"retention": "3 days"}, "event 'retention': duration '3 days'"),
        (JanitorInvoke.parse, {"orphan_grace": 5}, "'orphan_grace' must be a string or null"),
        (JanitorInvoke.parse, {"dry_run": "no"}, "'dry_run' must be true or false or null"),
        (JanitorInvoke.parse, {"max_files": 0}, "'max_files' must be at least 1"),
        (JanitorInvoke.parse, {"max_files": 2.5}, "'max_files' must be a whole number"),
    ],
)
def test_a_bad_event_is_refused_naming_the_key(parse: Any, event: object, message: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        parse(event)
    assert message in str(refused.value)


@pytest.mark.parametrize("event", [{"table": "../x", "rows": []}, {"table": "", "rows": []}])
def test_a_bad_table_name_is_refused_with_the_name_rule(event: dict[str, object]) -> None:
    with pytest.raises(InvalidNameError, match="must start with a lower-case letter"):
        InsertInvoke.parse(event)


def test_job_state_changes_of_other_sources_or_applications_are_not_ours() -> None:
    event = {
        "source": "aws.emr-serverless",
        "detail-type": "EMR Serverless Job Run State Change",
        "detail": {"applicationId": "app", "jobRunId": "run-1", "state": "SUCCESS"},
    }
    change = JobStateChange.parse(event, application_id="app")
    assert change is not None and (change.job_run_id, change.state) == ("run-1", "SUCCESS")
    assert JobStateChange.parse(event, application_id=None) is not None
    assert JobStateChange.parse(event, application_id="other") is None
    assert JobStateChange.parse({**event, "source": "aws.s3"}, application_id="app") is None
    assert JobStateChange.parse({**event, "detail": "x"}, application_id="app") is None
    assert JobStateChange.parse([event], application_id="app") is None
    assert JobStateChange.describe([event]) == {"event_type": "list"}


def test_the_error_answer_follows_its_schema() -> None:
    error_schema = jsonschema.Draft202012Validator(load_schema("error"))
    plain = error_answer(InvalidInputError("event 'rows' must be an array"))
    assert plain == {
        "error": {
            "type": "InvalidInputError",
            "message": "event 'rows' must be an array",
            "problems": [],
        }
    }
    rejected = error_answer(
        BatchRejectedError(
            "1 row refused",
            problems=(RowProblem(row=3, field="ts", message="not a timestamp"),),
        )
    )
    assert rejected["error"]["problems"] == [
        {"row": 3, "field": "ts", "message": "not a timestamp"}
    ]
    for answer in (plain, rejected):
        error_schema.validate(answer)


# -- the differential: our validator and models against the reference JSON Schema validator --

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=20_000),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-5, max_value=5),
    st.sampled_from(
        [
            "",
            " ",
            "events",
            "Events",
            "../x",
            "a" * 64,
            "3d",
            "1d12h",
            "90m",
            "3 days",
            "0s",
            " 2w ",
            "d",
            "json",
            "csv",
            "parquet",
            "xml",
            "SELECT 1",
            "2026-05-01T10:00:00",
            "2026-05-01T10:00:00+02:00",
            "yesterday",
            "n = 1",
        ]
    ),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["table", "where", "a", "ts"]), inner, max_size=3),
    ),
    max_leaves=6,
)


_NAMES = st.sampled_from(
    ["events", "t_2", "a" * 63, "events", "Events", "../x", "", "a" * 64, "events\n"]
)
_DURATIONS = st.sampled_from(
    ["3d", "1d12h", "90m", " 2w ", "0s", "3 days", "3 d", "1d 2h", "d", "1D", "99999999999999d"]
)
_ROWS = st.lists(st.dictionaries(st.sampled_from(["ts", "n"]), _SCALARS, max_size=2), max_size=2)
# What each key most often holds (a value its schema accepts, or nearly), besides anything.
_LIKELY: dict[str, dict[str, st.SearchStrategy[object]]] = {
    "insert": {"table": _NAMES, "rows": _ROWS, "idempotency_key": st.sampled_from(["k", ""])},
    "query": {
        "sql": st.sampled_from(["SELECT 1", " ", ""]),
        # Often null: a request giving both (not null) is refused by the schema.
        "snapshot_id": st.one_of(st.none(), st.integers(min_value=-1, max_value=3)),
        "as_of": st.sampled_from([None, "2026-05-01T10:00:00", "2026-05-01 10:00+02:00", "soon"]),
        "format": st.sampled_from(["json", "csv", "parquet", "xml"]),
        "max_rows": st.integers(min_value=-1, max_value=3),
        "tenant": st.sampled_from(["acme", None]),
    },
    "merge_orchestrator": {
        "table": _NAMES,
        "delete": st.fixed_dictionaries(
            {},
            optional={
                "table": _NAMES,
                "where": st.sampled_from(["n = 1", "", "true"]),
                "and": st.just(1),
            },
        ),
    },
    "janitor": {
        "table": _NAMES,
        "retention": _DURATIONS,
        "orphan_grace": _DURATIONS,
        "dry_run": st.booleans(),
        "max_files": st.integers(min_value=-1, max_value=3),
    },
}


@st.composite
def _events(draw: st.DrawFn, name: str) -> object:
    """Mostly objects of the schema's keys, each likely (7 in 10), anything (1) or absent (2);
    sometimes an unknown key; sometimes not an object at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(_VALUES)
    event: dict[str, object] = {}
    for key, likely in _LIKELY[name].items():
        choice = draw(st.integers(0, 9))
        if choice < 7:
            event[key] = draw(likely)
        elif choice < 8:
            event[key] = draw(_VALUES)
    if draw(st.integers(0, 9)) == 0:
        event["bogus"] = draw(_VALUES)
    return event


_DOLLAR = re.compile(r"(?<!\\)\$")


def _ecma_pattern(
    validator: Any, pattern: str, instance: object, schema: object
) -> Iterator[jsonschema.ValidationError]:
    """JSON Schema's patterns are ECMA-262 regular expressions, where '$' ends the string;
    jsonschema uses Python's re, where '$' also matches before a final newline (so it takes
    'events\\n' for a table name). fastjsonschema reads '$' as ECMA does."""
    if isinstance(instance, str) and not re.search(_DOLLAR.sub(r"\\Z", pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Reference = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"pattern": _ecma_pattern}
)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_the_models_accept_exactly_what_the_reference_validator_accepts(name: str) -> None:
    reference = _Reference(load_schema(name))  # type: ignore[arg-type]
    parse = PARSERS[name]
    seen = {True: 0, False: 0}

    @settings(max_examples=600, derandomize=True, deadline=None, database=None)
    @given(_events(name))
    def agree(event: object) -> None:
        if name in ("merge_orchestrator", "janitor") and event is None:
            return  # no event: the schedule, by design outside the schema
        valid = reference.is_valid(event)
        try:
            parse(event)
        except InvalidInputError as e:
            if valid:  # only what a schema cannot say may be refused beyond it
                assert (name, True) in {
                    ("query", "ISO-8601" in str(e)),
                    ("janitor", "is too long" in str(e)),
                }, (event, e)
            seen[False] += 1
        else:
            assert valid, event
            seen[True] += 1

    agree()
    assert seen[True] > 20 and seen[False] > 20, seen
