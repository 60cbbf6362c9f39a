"""Merge queues: SQS in AWS, an in-process queue on one machine.

The in-process queue hands SQS-shaped events (``{"Records": [...]}``) to the same batch handler
the merge-worker Lambda runs, and behaves like the deployed queue where it matters: failed
messages come back with a higher receive count, and a message that fails ``max_receives`` times
goes to the dead letters instead of blocking the queue.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from icefloe.errors import InvalidArgumentError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

logger = logging.getLogger(__name__)

SQS_BATCH = 10  # SendMessageBatch takes at most ten entries
BatchHandler = Callable[[Mapping[str, Any]], Mapping[str, Any]]


class QueueTask(Protocol):
    """A message of the merge queue: a merge task, or a part of a delete."""

    @property
    def table(self) -> str: ...

    def to_json(self) -> str: ...


T = TypeVar("T", bound=QueueTask)


class SqsTaskSender:
    """Sends tasks to an SQS queue, ten per request."""

    def __init__(self, *, client: SQSClient, queue_url: str) -> None:
        self._client = client
        self._queue_url = queue_url

    def send(self, tasks: Sequence[T]) -> list[T]:
        failed: list[T] = []
        for start in range(0, len(tasks), SQS_BATCH):
            chunk = tasks[start : start + SQS_BATCH]
            try:
                response = self._client.send_message_batch(
                    QueueUrl=self._queue_url,
                    Entries=[
                        {
                            "Id": str(i),
                            "MessageBody": task.to_json(),
                            "MessageAttributes": {
                                "table": {"DataType": "String", "StringValue": task.table}
                            },
                        }
                        for i, task in enumerate(chunk)
                    ],
                )
            except Exception as e:  # the whole request failed: none of the chunk was sent
                code = getattr(e, "response", {}).get("Error", {}).get("Code", type(e).__name__)
                logger.warning("sending %d merge tasks failed: %s: %s", len(chunk), code, e)
                failed.extend(chunk)
                continue
            for entry in response.get("Failed", []):
                logger.warning(
                    "merge task not sent: %s: %s", entry.get("Code"), entry.get("Message")
                )
                failed.append(chunk[int(entry["Id"])])
        return failed


@dataclass
class _Message:
    message_id: str
    body: str
    receives: int = 0


@dataclass(frozen=True, slots=True)
class DrainReport:
    """What :meth:`InProcessQueue.drain` delivered."""

    deliveries: int
    acknowledged: int
    dead_letters: tuple[str, ...] = field(default=())


class InProcessQueue:
    """An in-memory merge queue for one process (local mode and tests)."""

    def __init__(self, *, max_receives: int = 5, batch_size: int = SQS_BATCH) -> None:
        self._messages: deque[_Message] = deque()
        self.max_receives = max_receives
        self.batch_size = batch_size
        self.dead_letters: list[str] = []

    def __len__(self) -> int:
        return len(self._messages)

    def send(self, tasks: Sequence[T]) -> list[T]:
        for task in tasks:
            self.send_body(task.to_json())
        return []

    def send_body(self, body: str) -> str:
        message = _Message(message_id=str(uuid.uuid4()), body=body)
        self._messages.append(message)
        return message.message_id

    def drain(self, handler: BatchHandler, *, workers: int = 1) -> DrainReport:
        """Deliver until the queue is empty; failed messages are redelivered, up to
        ``max_receives`` deliveries each, then dead-lettered.

        ``workers`` handlers run at once in threads, as that many worker Lambdas would: each
        wave takes up to ``workers`` batches' worth of messages and deals them out evenly (so
        twelve tasks on two workers are two batches of six, not one of ten and one of two)."""
        if workers < 1:
            raise InvalidArgumentError(f"workers must be at least 1, not {workers}")
        deliveries = acknowledged = 0
        dead: list[str] = []
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="merge-worker") as pool:
            while self._messages:
                wave = [
                    self._messages.popleft()
                    for _ in range(min(self.batch_size * workers, len(self._messages)))
                ]
                for message in wave:
                    message.receives += 1
                batches = [wave[i::workers] for i in range(min(workers, len(wave)))]
                deliver = partial(_deliver, handler)
                responses = map(deliver, batches) if workers == 1 else pool.map(deliver, batches)
                for batch, response in zip(batches, responses, strict=True):
                    deliveries += 1
                    failed = {
                        item["itemIdentifier"] for item in response.get("batchItemFailures", [])
                    }
                    for message in batch:
                        if message.message_id not in failed:
                            acknowledged += 1
                        elif message.receives >= self.max_receives:
                            dead.append(message.body)
                        else:
                            self._messages.append(message)
        self.dead_letters.extend(dead)
        return DrainReport(
            deliveries=deliveries, acknowledged=acknowledged, dead_letters=tuple(dead)
        )


def _deliver(handler: BatchHandler, batch: Sequence[_Message]) -> Mapping[str, Any]:
    return handler({"Records": [_record(m) for m in batch]})


def _record(message: _Message) -> dict[str, Any]:
    return {
        "messageId": message.message_id,
        "receiptHandle": message.message_id,
        "body": message.body,
        "attributes": {"ApproximateReceiveCount": str(message.receives)},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:local:000000000000:icefloe-merge",
        "awsRegion": "local",
    }
