"""What the Lambda functions accept and answer: typed events checked against JSON Schemas.

The schemas in ``icefloe/aws/schemas/`` are the contract of each direct invoke (insert, query,
merge orchestrator, janitor) and of the error answer every function gives for input it
refuses. They are the only rule set: an event is checked against its schema (compiled once per
process by fastjsonschema) and then turned into a typed model; what a schema cannot say (a
duration's value, an ISO-8601 time) is checked while building the model. A refusal is an
:class:`~icefloe.errors.InvalidInputError` naming the key at fault, e.g. ``event 'rows' must be
an array`` or ``unknown event keys ['idempotencyKey']; expected [...]``.

JSON has one number type: an integer key accepts ``10.0`` as 10, as JSON Schema says.

The queue-fed functions (insert, merge worker) take SQS events through :class:`SqsBatch`: a
record that is no usable SQS record fails by its message id, while its neighbours go on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from typing import Any, Literal, cast

import fastjsonschema

from icefloe.errors import BatchRejectedError, InvalidInputError
from icefloe.janitor import DEFAULT_MAX_FILES, parse_duration
from icefloe.lifecycle import DeleteRequest
from icefloe.query.service import DEFAULT_MAX_INLINE_ROWS, QueryRequest
from icefloe.spec import validate_table_name

SchemaName = Literal["insert", "query", "merge_orchestrator", "janitor", "error"]
SCHEMAS: tuple[SchemaName, ...] = ("insert", "query", "merge_orchestrator", "janitor", "error")

_TYPE_WORDS = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}
# Keys whose pattern stands for a rule the core states in its own words.
_EXPLAINED_BY: dict[str, Callable[[str], object]] = {
    "table": validate_table_name,
    "retention": parse_duration,
    "orphan_grace": parse_duration,
}


def load_schema(name: SchemaName) -> dict[str, Any]:
    """The JSON Schema ``name`` as shipped in the package."""
    text = resources.files("icefloe.aws").joinpath(f"schemas/{name}.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator(name: SchemaName) -> Callable[[object], object]:
    validate: Callable[[object], object] = fastjsonschema.compile(
        load_schema(name), use_default=False
    )
    return validate


def check(name: SchemaName, value: object, *, noun: str = "event") -> None:
    """Check ``value`` against the schema ``name``; refuse it naming the key at fault."""
    try:
        _validator(name)(value)
    except fastjsonschema.JsonSchemaValueException as e:
        raise _refusal(e, noun=noun) from None


# The keys of an EventBridge event (replay-name on a replayed one): nothing else, so that a
# direct invoke carrying a "source" is checked, not taken for the schedule ({"dry_run": true,
# "source": ...} would otherwise run for real over every table).
EVENTBRIDGE_KEYS = frozenset(
    {
        "version",
        "id",
        "detail-type",
        "source",
        "account",
        "time",
        "region",
        "resources",
        "detail",
        "replay-name",
    }
)


def is_scheduled(event: object) -> bool:
    """An EventBridge scheduled event (or no event at all): the schedule means every table."""
    return event is None or (
        isinstance(event, Mapping)
        and "source" in event
        and "detail-type" in event
        and set(event) <= EVENTBRIDGE_KEYS
    )


@dataclass(frozen=True, slots=True)
class InsertInvoke:
    """A direct invoke of the insert function (``insert.schema.json``)."""

    table: str
    rows: Sequence[Mapping[str, object]]
    idempotency_key: str | None = None

    @classmethod
    def parse(cls, event: object) -> InsertInvoke:
        check("insert", event)
        fields = cast(Mapping[str, Any], event)
        return cls(
            table=validate_table_name(fields["table"]),
            rows=fields["rows"],
            idempotency_key=fields.get("idempotency_key"),
        )


def parse_query(event: object) -> QueryRequest:
    """A direct invoke of the query function (``query.schema.json``) as a
    :class:`QueryRequest`."""
    check("query", event, noun="request")
    fields = cast(Mapping[str, Any], event)
    as_of = fields.get("as_of")
    snapshot_id = fields.get("snapshot_id")
    return QueryRequest(
        sql=fields["sql"],
        snapshot_id=None if snapshot_id is None else int(snapshot_id),
        as_of=None if as_of is None else _timestamp(as_of, key="as_of"),
        format=fields.get("format", "json"),
        max_rows=int(fields.get("max_rows", DEFAULT_MAX_INLINE_ROWS)),
        tenant=fields.get("tenant"),
    )


@dataclass(frozen=True, slots=True)
class OrchestratorInvoke:
    """What the merge orchestrator is asked (``merge_orchestrator.schema.json``): every table
    (``table`` None), one table, or a delete to start."""

    table: str | None = None
    delete: DeleteRequest | None = None

    @classmethod
    def parse(cls, event: object) -> OrchestratorInvoke:
        if is_scheduled(event):
            return cls()
        check("merge_orchestrator", event)
        fields = cast(Mapping[str, Any], event)
        delete = fields.get("delete")
        if delete is not None:
            table = validate_table_name(delete["table"])
            return cls(delete=DeleteRequest(table=table, where=delete["where"]))
        return cls(table=_table(fields.get("table")))


@dataclass(frozen=True, slots=True)
class JanitorInvoke:
    """What the janitor is asked (``janitor.schema.json``); ``None`` leaves the choice to each
    table's own policy."""

    table: str | None = None
    retention: timedelta | None = None
    orphan_grace: timedelta | None = None
    dry_run: bool = False
    max_files: int = DEFAULT_MAX_FILES

    @classmethod
    def parse(cls, event: object) -> JanitorInvoke:
        if is_scheduled(event):
            return cls()
        check("janitor", event)
        fields = cast(Mapping[str, Any], event)
        max_files = fields.get("max_files")
        return cls(
            table=_table(fields.get("table")),
            retention=_duration(fields.get("retention")),
            orphan_grace=_duration(fields.get("orphan_grace")),
            dry_run=bool(fields.get("dry_run")),
            max_files=DEFAULT_MAX_FILES if max_files is None else int(max_files),
        )


SQS_EVENT_SOURCE = "aws:sqs"


def is_sqs_event(event: object) -> bool:
    """Shaped as what Lambda's SQS event source mapping sends: an object with ``Records`` (which
    :meth:`SqsBatch.parse` may still refuse)."""
    return isinstance(event, Mapping) and "Records" in event


@dataclass(frozen=True, slots=True)
class SqsBatch:
    """An SQS event of a queue-fed function, split: ``records`` the core can take (an object
    from ``aws:sqs`` with a message id and a string body), and ``refused``, the message id of
    every other record with why. Refused records are answered as batch item failures beside the
    core's own, so that their well-formed neighbours are still processed. A message id SQS
    delivered twice in the event, one copy refused, is refused whole: no copy of it is
    processed.

    A record with no usable ``messageId`` (not an object, no id, an id that is not a non-empty
    string: an SNS or S3 record, a hand-made one) cannot be named in ``batchItemFailures``. SQS
    gives every record an id, so such an event was not delivered by SQS: :meth:`parse` refuses
    the whole event, naming the record, and nothing of it is processed. Its invoker reads an
    error answer and knows that none of its records went through; had the others been
    processed, it could not tell which record was dropped.
    """

    records: tuple[Mapping[str, Any], ...]
    refused: Mapping[str, str]  # message id -> why

    @classmethod
    def parse(cls, event: object) -> SqsBatch:
        if not isinstance(event, Mapping):
            raise InvalidInputError("event must be an object: an SQS event with 'Records'")
        if "Records" not in event:
            raise InvalidInputError("event must have 'Records': only an SQS event is accepted")
        records = event["Records"]
        if not isinstance(records, list):
            raise InvalidInputError("event 'Records' must be an array of SQS records")
        taken: list[Mapping[str, Any]] = []
        refused: dict[str, str] = {}
        for index, record in enumerate(records):
            message_id = _message_id(record, index=index)  # refuses the whole event
            sqs_record = cast(Mapping[str, Any], record)
            reason = _unusable(sqs_record)
            if reason is None:
                taken.append(sqs_record)
            else:
                refused[message_id] = f"record {message_id!r}: {reason}"
        # A message id failed is failed for all its copies: none of them goes to the core.
        usable = tuple(r for r in taken if r["messageId"] not in refused)
        return cls(records=usable, refused=refused)

    def event(self) -> dict[str, Any]:
        """The SQS event of the records the core can take."""
        return {"Records": list(self.records)}

    def answer(self, processed: Mapping[str, Any]) -> dict[str, Any]:
        """The core's partial batch response for :meth:`event`, with the refused records
        added as failures."""
        failures = [item["itemIdentifier"] for item in processed.get("batchItemFailures", [])]
        failures += [m for m in self.refused if m not in failures]
        return {
            **processed,
            "batchItemFailures": [{"itemIdentifier": m} for m in failures],
        }


def _message_id(record: object, *, index: int) -> str:
    where = f"record {index} of 'Records'"
    if not isinstance(record, Mapping):
        raise InvalidInputError(f"{where} is not an object (an SQS record)")
    if "messageId" not in record:
        source = record.get("eventSource", record.get("EventSource"))
        came = f" (its 'eventSource' is {source!r})" if source is not None else ""
        raise InvalidInputError(f"{where} has no 'messageId'{came}")
    message_id = record["messageId"]
    if not isinstance(message_id, str) or not message_id.strip():
        raise InvalidInputError(f"{where}: 'messageId' must be a non-empty string")
    return message_id


def _unusable(record: Mapping[str, Any]) -> str | None:
    """Why the core cannot take this SQS record, or None."""
    if "eventSource" not in record:
        return f"no 'eventSource' (expected {SQS_EVENT_SOURCE!r})"
    if record["eventSource"] != SQS_EVENT_SOURCE:
        return f"'eventSource' is {record['eventSource']!r}, expected {SQS_EVENT_SOURCE!r}"
    if "body" not in record:
        return "no 'body'"
    if not isinstance(record["body"], str):
        return f"'body' must be a string, not {_json_type(record['body'])}"
    return None


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return _TYPE_WORDS["boolean"]
    if isinstance(value, int):
        return _TYPE_WORDS["integer"]
    if isinstance(value, float):
        return _TYPE_WORDS["number"]
    if isinstance(value, Mapping):
        return _TYPE_WORDS["object"]
    if isinstance(value, list):
        return _TYPE_WORDS["array"]
    return _TYPE_WORDS["null"] if value is None else type(value).__name__


JOB_STATE_SOURCE = "aws.emr-serverless"
JOB_STATE_DETAIL_TYPE = "EMR Serverless Job Run State Change"


@dataclass(frozen=True, slots=True)
class JobStateChange:
    """An EMR Serverless job-state change of this stack's application (EventBridge)."""

    application_id: str | None
    job_run_id: str | None
    state: str | None
    event: dict[str, Any]

    @classmethod
    def parse(cls, event: object, *, application_id: str | None) -> JobStateChange | None:
        """The change, or ``None`` for any other event: another source or detail-type,
        another application than ``application_id`` (the stack's rule matches its own only;
        this guards direct invokes and rule edits), or a detail whose ``jobRunId`` or
        ``state`` is not a string (no event of EMR Serverless)."""
        if not isinstance(event, Mapping):
            return None
        if event.get("source") != JOB_STATE_SOURCE:
            return None
        if event.get("detail-type") != JOB_STATE_DETAIL_TYPE:
            return None
        detail = event.get("detail")
        if not isinstance(detail, Mapping):
            return None
        if application_id is not None and detail.get("applicationId") != application_id:
            return None
        if not isinstance(detail.get("jobRunId"), str) or not isinstance(detail.get("state"), str):
            return None  # EMR Serverless sends both as strings: this is no change of a job run
        return cls(
            application_id=_text(detail.get("applicationId")),
            job_run_id=_text(detail.get("jobRunId")),
            state=_text(detail.get("state")),
            event=dict(event),
        )

    @staticmethod
    def describe(event: object) -> dict[str, Any]:
        """What a log line says of an event that was not settled."""
        if not isinstance(event, Mapping):
            return {"event_type": type(event).__name__}
        detail = event.get("detail")
        detail = detail if isinstance(detail, Mapping) else {}
        return {
            "source": event.get("source"),
            "detail_type": event.get("detail-type"),
            "application_id": detail.get("applicationId"),
            "job_run_id": detail.get("jobRunId"),
            "state": detail.get("state"),
        }


def error_answer(error: Exception) -> dict[str, Any]:
    """The answer every function gives for input it refuses (``error.schema.json``)."""
    problems = error.problems if isinstance(error, BatchRejectedError) else ()
    return {
        "error": {
            "type": type(error).__name__,
            "message": str(error),
            "problems": [{"row": p.row, "field": p.field, "message": p.message} for p in problems],
        }
    }


def _refusal(e: fastjsonschema.JsonSchemaValueException, *, noun: str) -> InvalidInputError:
    path = [str(part) for part in (e.path or ["data"])[1:]]
    where = f"{noun} {'.'.join(path)!r}" if path else noun
    definition: Mapping[str, Any] = e.definition if isinstance(e.definition, Mapping) else {}
    value = e.value
    if e.rule == "type":
        expected = e.rule_definition
        kinds = [k for k in (expected if isinstance(expected, list) else [expected]) if k]
        words = " or ".join(_TYPE_WORDS.get(str(kind), str(kind)) for kind in kinds)
        return InvalidInputError(f"{where} must be {words}")
    known = sorted(definition.get("properties", {}))
    unknown = sorted(set(value) - set(known)) if isinstance(value, Mapping) else []
    if e.rule in ("additionalProperties", "required") and unknown:
        # A key missing beside an unknown one is most likely misspelt: say which.
        keys = f"{noun} keys" if not path else f"keys in {where}"
        return InvalidInputError(f"unknown {keys} {unknown}; expected {known}")
    if e.rule == "required" and isinstance(value, Mapping):
        missing = [key for key in definition.get("required", []) if key not in value]
        return InvalidInputError(f"{where} must have {missing[0]!r}")
    if e.rule == "minimum":
        return InvalidInputError(f"{where} must be at least {e.rule_definition}")
    if e.rule == "maximum":
        return InvalidInputError(f"{where} must be at most {e.rule_definition}")
    if e.rule == "enum":
        choices = ", ".join(str(choice) for choice in e.rule_definition)
        return InvalidInputError(f"{where} must be one of {choices}")
    if e.rule in ("minLength", "pattern") and path and path[-1] in _EXPLAINED_BY:
        try:
            _EXPLAINED_BY[path[-1]](value)
        except InvalidInputError as explained:
            if path[-1] == "table":
                return explained  # an InvalidNameError, whose message names the table
            return InvalidInputError(f"{where}: {explained}")
    if e.rule in ("minLength", "pattern") and isinstance(value, str) and not value.strip():
        return InvalidInputError(f"{where} must be a non-empty string")
    if e.rule == "not":
        return InvalidInputError(f"{where}: {e.rule_definition.get('description', e.message)}")
    return InvalidInputError(f"{where} is not valid: {e.message}")


def _table(value: str | None) -> str | None:
    # The schema's pattern says the same; the core's rule is applied too, so that a schema
    # drifting from it is caught (tests/unit/core/test_events.py).
    return None if value is None else validate_table_name(value)


def _duration(value: str | None) -> timedelta | None:
    return None if value is None else parse_duration(value)


def _timestamp(value: str, *, key: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as e:
        raise InvalidInputError(f"request {key!r} must be an ISO-8601 timestamp") from e
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
