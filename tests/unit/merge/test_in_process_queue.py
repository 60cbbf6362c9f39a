"""The in-process merge queue: batches dealt out to concurrent handlers, failed messages
redelivered, and dead-lettered after their last receive."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from icefloe.errors import InvalidArgumentError
from icefloe.merge import InProcessQueue


class Recorder:
    """A batch handler that records each batch's bodies and the threads it ran on, failing
    each body in ``failing`` every time."""

    def __init__(self, failing: frozenset[str] = frozenset()) -> None:
        self.failing = failing
        self.batches: list[list[str]] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, event: Mapping[str, Any]) -> Mapping[str, Any]:
        bodies = [r["body"] for r in event["Records"]]
        with self._lock:
            self.batches.append(bodies)
            self.threads.add(threading.current_thread().name)
        return {
            "batchItemFailures": [
                {"itemIdentifier": r["messageId"]}
                for r in event["Records"]
                if r["body"] in self.failing
            ]
        }


def test_a_wave_is_dealt_out_evenly_to_the_workers() -> None:
    # Given twelve messages
    queue = InProcessQueue()
    for n in range(12):
        queue.send_body(f"m{n}")
    handler = Recorder()

    # When two workers drain the queue
    report = queue.drain(handler, workers=2)

    # Then two batches of six went out, every message once, and all were acknowledged
    assert sorted(len(b) for b in handler.batches) == [6, 6]
    assert sorted(m for b in handler.batches for m in b) == sorted(f"m{n}" for n in range(12))
    assert report.deliveries == 2 and report.acknowledged == 12 and not report.dead_letters
    assert len(queue) == 0


def test_handlers_run_at_once_on_worker_threads() -> None:
    # Given a handler that waits until two of its calls are in flight together
    queue = InProcessQueue()
    for n in range(4):
        queue.send_body(f"m{n}")
    handler = Recorder()
    both = threading.Barrier(2, timeout=10)

    def meet(event: Mapping[str, Any]) -> Mapping[str, Any]:
        both.wait()  # raises BrokenBarrierError unless another batch runs meanwhile
        return handler(event)

    # When two workers drain the queue
    report = queue.drain(meet, workers=2)

    # Then both batches ran at once, each on a worker thread
    assert report.acknowledged == 4
    assert len(handler.threads) == 2
    assert all(name.startswith("merge-worker") for name in handler.threads)


def test_failed_messages_come_back_until_their_last_receive() -> None:
    # Given a message that always fails among good ones
    queue = InProcessQueue(max_receives=3)
    for body in ("good1", "bad", "good2", "good3"):
        queue.send_body(body)
    handler = Recorder(failing=frozenset({"bad"}))

    # When three workers drain the queue
    report = queue.drain(handler, workers=3)

    # Then the bad one was delivered three times and dead-lettered; the good ones once each
    delivered = [m for b in handler.batches for m in b]
    assert delivered.count("bad") == 3
    assert sorted(m for m in delivered if m != "bad") == ["good1", "good2", "good3"]
    assert report.dead_letters == ("bad",) and queue.dead_letters == ["bad"]
    assert report.acknowledged == 3


@pytest.mark.parametrize("workers", [0, -1])
def test_fewer_than_one_worker_is_refused(workers: int) -> None:
    with pytest.raises(InvalidArgumentError, match="at least 1"):
        InProcessQueue().drain(Recorder(), workers=workers)
