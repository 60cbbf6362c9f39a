"""Queue ingestion: a batch of delivered messages becomes one commit per table.

Each message is one event (its table from the ``table`` message attribute, else the default
table) or an envelope ``{"table": ..., "rows": [...]}``: any object with both keys ``table``
and ``rows`` is an envelope, and an envelope with another key (``idempotency_key`` included,
unless null) fails naming it, as does an object whose keys are the envelope's in another case
(``{"Table", "rows"}``), rather than being taken for an event of the default table. All good
messages of a batch for one table go into one insert (the batch is what makes files big), with
the message ids as receipts so that a redelivered message is committed once however the queue
regroups it; a message id the batch holds twice is taken once (both copies alike) or fails
(copies that differ). A malformed message, one whose rows do not fit the table, or one whose
content makes the insert crash (isolated by inserting halves of the batch on their own) is
reported as failed (the queue retries it and finally moves it to its DLQ) and never holds back
the good ones. Only a failure of the system (meta store, object store, local disk) fails the
whole batch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import orjson

from icefloe.errors import (
    BatchRejectedError,
    CommitError,
    CommitOutcomeUnknownError,
    ConfigError,
    DuplicateReceiptError,
    InvalidInputError,
    MetaStoreNotInitializedError,
    MetaStoreUnavailableError,
    NotFoundError,
    RowProblem,
    StorageError,
)
from icefloe.ingest.exact_numbers import loads_exactly, orjson_suspects
from icefloe.ingest.insert import Inserter, InsertResult
from icefloe.spec import validate_table_name

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """What the core needs of an SQS message (``body`` None: the record carried none;
    ``refusal``: why the record cannot be taken, e.g. an unusable ``table`` attribute, so that
    the message fails by its id)."""

    message_id: str
    body: str | None
    table: str | None = None
    refusal: str | None = None


def messages_from_sqs_records(records: object) -> list[QueueMessage]:
    """The messages of an SQS event's ``Records``. A record without a body or with an odd
    ``table`` attribute (there but empty, not a string, binary, or named in another case)
    becomes a message that fails by its id; without one, the default table is meant. A record
    without a ``messageId`` cannot be reported on its own, so it refuses the whole event (only
    a wiring mistake sends one)."""
    if not isinstance(records, list):
        raise InvalidInputError("'Records' must be a list of SQS records")
    messages = []
    for index, record in enumerate(records):
        if not isinstance(record, Mapping) or not isinstance(record.get("messageId"), str):
            raise InvalidInputError(f"record {index} of 'Records' has no 'messageId'")
        if record.get("eventSource") != "aws:sqs":
            raise InvalidInputError(
                f"record {record['messageId']} comes from {record.get('eventSource')!r},"
                " expected 'aws:sqs'"
            )
        body = record.get("body")
        try:
            table, refusal = _table_attribute(record.get("messageAttributes")), None
        except InvalidInputError as e:
            table, refusal = None, str(e)
        messages.append(
            QueueMessage(
                message_id=record["messageId"],
                body=body if isinstance(body, str) else None,
                table=table,
                refusal=refusal,
            )
        )
    return messages


def _table_attribute(attributes: object) -> str | None:
    """The table a record's ``table`` message attribute names; None when it has none. One that
    is there but unusable (empty, not a string, binary) is refused: falling back to the default
    table would misroute the message."""
    if attributes is None:
        return None
    if not isinstance(attributes, Mapping):
        raise InvalidInputError("the record's 'messageAttributes' is not an object")
    misspelt = sorted(str(k) for k in attributes if k != "table" and str(k).lower() == "table")
    if misspelt:
        raise InvalidInputError(
            f"message attribute {misspelt[0]!r} is not 'table' (attribute names are"
            " case-sensitive): send the table in the attribute 'table'"
        )
    if "table" not in attributes:
        return None
    attribute = attributes["table"]
    if not isinstance(attribute, Mapping):
        raise InvalidInputError(
            "the 'table' message attribute is not an SQS message attribute (an object with"
            " 'stringValue')"
        )
    value = attribute.get("stringValue")
    if value is None:
        binary = attribute.get("binaryValue") is not None or attribute.get("binaryListValues")
        kind = " (it is binary: send it with DataType 'String')" if binary else ""
        raise InvalidInputError(f"the 'table' message attribute has no 'stringValue'{kind}")
    if not isinstance(value, str):
        raise InvalidInputError(
            "the 'table' message attribute's 'stringValue' must be a string, not"
            f" {type(value).__name__}"
        )
    if not value:
        raise InvalidInputError("the 'table' message attribute is empty")
    return value


@dataclass(frozen=True, slots=True)
class QueueBatchOutcome:
    """Per message: committed now, committed by an earlier delivery, or failed (with why)."""

    commits: tuple[InsertResult, ...]
    failed: Mapping[str, str]
    already_committed: tuple[str, ...]

    @property
    def failed_message_ids(self) -> tuple[str, ...]:
        return tuple(self.failed)


@dataclass
class _Parsed:
    message_id: str
    table: str
    rows: list[Mapping[str, object]]


@dataclass
class _Tally:
    commits: list[InsertResult] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    already: list[str] = field(default_factory=list)


def insert_queue_messages(
    inserter: Inserter, messages: Sequence[QueueMessage], *, default_table: str | None = None
) -> QueueBatchOutcome:
    """Insert a delivered batch; never raises for a bad message, only for a failure of the
    system (the meta store or object store down), on which the whole batch is retried."""
    tally = _Tally()
    groups: dict[str, list[_Parsed]] = {}
    taken = _one_per_id(messages, tally)
    suspects = orjson_suspects([m.body or "" for m in taken])
    for message, suspect in zip(taken, suspects, strict=True):
        try:
            parsed = _parse(message, default_table=default_table, suspect=suspect)
        except InvalidInputError as e:
            tally.failed[message.message_id] = str(e)
            continue
        groups.setdefault(parsed.table, []).append(parsed)
    for table, parsed_messages in groups.items():
        _insert_group(inserter, table, parsed_messages, tally)
    return QueueBatchOutcome(
        commits=tuple(tally.commits),
        failed=dict(tally.failed),
        already_committed=tuple(tally.already),
    )


def _one_per_id(messages: Sequence[QueueMessage], tally: _Tally) -> list[QueueMessage]:
    """Each message id once, in the order first given: a receipt is committed once, so the
    copies of a message SQS delivered twice in one batch are one message when alike; copies
    that differ fail their id (which of them is the message cannot be told). An id holding NUL
    cannot be stored as a receipt: it fails. Either fails that id alone."""
    copies: dict[str, list[QueueMessage]] = {}
    for message in messages:
        copies.setdefault(message.message_id, []).append(message)
    taken = []
    for message_id, same in copies.items():
        if "\x00" in message_id:
            tally.failed[message_id] = "the message id holds NUL: it cannot be a receipt"
        elif any(copy != same[0] for copy in same[1:]):
            tally.failed[message_id] = (
                f"the batch holds message {message_id!r} {len(same)} times, with different"
                " bodies or attributes"
            )
        else:
            if len(same) > 1:
                logger.info("message %s is %d times in the batch", message_id, len(same))
            taken.append(same[0])
    return taken


def _parse(message: QueueMessage, *, default_table: str | None, suspect: bool) -> _Parsed:
    """``suspect``: whether the body may hold a number orjson reads inexactly."""
    if message.refusal is not None:
        raise InvalidInputError(message.refusal)
    if message.body is None:
        raise InvalidInputError("the SQS record has no string 'body'")
    try:
        body = orjson.loads(message.body)
    except orjson.JSONDecodeError as e:
        if str(e).startswith(("depth limit", "recursion limit")):  # orjson reads 1,024 levels
            raise InvalidInputError(f"message body is nested too deeply: {e}") from e
        raise InvalidInputError(f"message body is not JSON: {e}") from e
    repeated = _repeated_key(message.body, body)
    if repeated is not None:
        key = f"the key {repeated!r}" if repeated else "a key"
        raise InvalidInputError(f"message body gives {key} twice in one object")
    body = loads_exactly(message.body, body, suspect=suspect)  # digits a double would lose
    if not isinstance(body, dict):
        raise InvalidInputError("message body is not a JSON object")
    if "table" in body and "rows" in body:
        _check_envelope_keys(body)
        table, rows = body["table"], body["rows"]
        if not isinstance(table, str):
            raise InvalidInputError("envelope 'table' is not a string")
        if not isinstance(rows, list) or not rows:
            raise InvalidInputError("envelope 'rows' is not a non-empty list")
        if not all(isinstance(r, dict) for r in rows):
            raise InvalidInputError("envelope 'rows' holds something that is not a JSON object")
        return _Parsed(message.message_id, table, rows)
    folded = {key.lower() for key in body}
    if folded >= {"table", "rows"} and folded <= set(_ENVELOPE_KEYS):
        # {"Table", "rows"}: an envelope misspelt, not an event of the default table.
        misspelt = sorted(key for key in body if key not in _ENVELOPE_KEYS)
        raise InvalidInputError(
            f"message body spells envelope keys in another case: {misspelt}; an envelope's"
            " keys are 'table' and 'rows', in lower case"
        )
    table = message.table or default_table
    if not table:
        raise InvalidInputError(
            'no table for this event: send an envelope {"table", "rows"}, set the message'
            " attribute 'table', or configure a default table"
        )
    return _Parsed(message.message_id, table, [body])


# The keys of an envelope: those of the insert function's direct invoke (insert.schema.json).
_ENVELOPE_KEYS = ("table", "rows", "idempotency_key")


def _check_envelope_keys(body: Mapping[str, object]) -> None:
    """Refuse an envelope with a key beyond the direct invoke's, or with an idempotency key: a
    queued message is committed once by its message id (its receipt), and its rows share one
    commit with the other messages of the batch, so a key of its own could not name a commit."""
    unknown = sorted(key for key in body if key not in _ENVELOPE_KEYS)
    if unknown:
        raise InvalidInputError(
            f"unknown envelope keys {unknown}; expected 'table' and 'rows' (an object with"
            " both is an envelope, not an event)"
        )
    if body.get("idempotency_key") is not None:
        raise InvalidInputError(
            "envelope key 'idempotency_key' is not taken from the queue: the message id already"
            " commits a message once, however often SQS delivers it; to commit under a key of"
            " your own, invoke the insert function directly"
        )


def _repeated_key(text: str, parsed: object) -> str | None:
    """A key ``text`` gives twice in one object (orjson keeps the last value silently), or None
    (``""`` for one found nested too deeply to name).

    Outside strings, standard JSON has exactly one ``:`` per object member; inside, a ``:`` is
    itself, unless escaped as ``\\u003a``. So when the text escapes none, it repeats no key
    exactly when it holds as many ``:`` as the parsed value printed again: one count in C for
    the common case, a second parse only when the counts differ (or a ``\\u003`` escape
    appears)."""
    if "\\u003" not in text and text.count(":") == _printed_colons(parsed):
        return None

    class _Repeated(Exception):
        pass

    def pairs(members: list[tuple[str, object]]) -> dict[str, object]:
        seen: dict[str, object] = {}
        for key, value in members:
            if key in seen:
                raise _Repeated(key)
            seen[key] = value
        return seen

    try:
        json.loads(text, object_pairs_hook=pairs)
    except _Repeated as e:
        return str(e.args[0])
    except RecursionError:  # nested deeper than Python's parser goes (orjson reads 1,024)
        # Unnamed, and only when no escaped ':' can explain the difference.
        escaped = "\\u003" in text
        return "" if not escaped and text.count(":") != _printed_colons(parsed) else None
    return None


def _printed_colons(parsed: object) -> int:
    """The ``:`` of ``parsed`` printed as JSON: one per object member, and those its strings
    hold. orjson prints it in C; past its 254 levels of nesting, a walk without recursion
    counts them."""
    try:
        return orjson.dumps(parsed).count(b":")
    except (orjson.JSONEncodeError, TypeError):
        pass
    count, pending = 0, [parsed]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            count += len(value) + sum(key.count(":") for key in value)
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, str):
            count += value.count(":")
    return count


def _insert_group(inserter: Inserter, table: str, pending: list[_Parsed], tally: _Tally) -> None:
    def insert(group: list[_Parsed]) -> None:
        while group:
            group = _insert_round(inserter, table, group, tally)

    try:
        validate_table_name(table)
        crashed = isolate_crashes(pending, insert)
    except _GROUP_REFUSALS as e:  # an unknown or malformed table name
        for p in pending:
            tally.failed[p.message_id] = str(e)
        return
    for p, error in crashed:
        logger.warning("message %s for %s crashed the insert", p.message_id, table, exc_info=error)
        tally.failed[p.message_id] = (
            f"the insert failed unexpectedly: {type(error).__name__}: {error}"
        )


# Failures of the system, not of a message: the whole batch is retried. Everything else that
# escapes an insert is blamed on the messages and isolated (see isolate_crashes).
SYSTEM_FAILURES: tuple[type[BaseException], ...] = (
    MetaStoreUnavailableError,
    MetaStoreNotInitializedError,
    CommitOutcomeUnknownError,
    CommitError,  # a dropped and recreated table: the batch is retried against the new one
    StorageError,
    ConfigError,
    OSError,
    MemoryError,
)
T = TypeVar("T")
# Refusals that name no message of their own (a table that does not exist): for every message.
_GROUP_REFUSALS = (NotFoundError, InvalidInputError)


def isolate_crashes(
    items: list[T], attempt: Callable[[list[T]], None]
) -> list[tuple[T, Exception]]:
    """Run ``attempt`` on ``items``; if it crashes, on each half on its own, down to single
    items. Returns the items that crash alone, with their errors: every other item goes through
    an attempt that succeeded (k bad items among n cost about 2k·log2(n) attempts). A system
    failure, or a refusal that concerns the whole group, is raised at once."""
    try:
        attempt(items)
    except SYSTEM_FAILURES + _GROUP_REFUSALS:
        raise
    except Exception as e:  # a crash caused by some item's content
        if len(items) <= 1:
            return [(item, e) for item in items]
        middle = len(items) // 2
        return isolate_crashes(items[:middle], attempt) + isolate_crashes(items[middle:], attempt)
    return []


def _insert_round(
    inserter: Inserter, table: str, pending: list[_Parsed], tally: _Tally
) -> list[_Parsed]:
    """One insert attempt; returns the messages still to insert (empty when done)."""
    done = inserter.committed_receipts(table, [p.message_id for p in pending])
    if done:
        tally.already.extend(p.message_id for p in pending if p.message_id in done)
        pending = [p for p in pending if p.message_id not in done]
        if not pending:
            return []
    rows: list[Mapping[str, object]] = []
    owners: list[str] = []
    for p in pending:
        rows.extend(p.rows)
        owners.extend([p.message_id] * len(p.rows))
    try:
        result = inserter.insert_rows(table, rows, receipts=[p.message_id for p in pending])
    except DuplicateReceiptError as e:
        logger.info("%d messages for %s were committed meanwhile", len(e.receipts), table)
        return pending  # the next round finds them committed
    except BatchRejectedError as e:
        blamed = {owners[pr.row]: pr for pr in e.problems if pr.row is not None}
        if not blamed:  # a batch-wide reason (size): try the messages one by one
            if len(pending) == 1:
                tally.failed[pending[0].message_id] = str(e)
            else:
                for p in pending:
                    _insert_group(inserter, table, [p], tally)
            return []
        for message_id, problem in blamed.items():
            tally.failed[message_id] = _in_message(problem, first_row=owners.index(message_id))
        return [p for p in pending if p.message_id not in blamed]
    tally.commits.append(result)
    return []


def _in_message(problem: RowProblem, *, first_row: int) -> str:
    """Problems name rows of the combined batch; say which row of the message it was."""
    assert problem.row is not None
    field = f", field {problem.field!r}" if problem.field is not None else ""
    return f"row {problem.row - first_row} of the message{field}: {problem.message}"
