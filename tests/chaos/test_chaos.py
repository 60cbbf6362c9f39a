"""Chaos: processes inserting (retrying their idempotency keys), merging, compacting,
deleting (the last row of every batch, again and again) and collecting garbage over one
embedded meta store are killed with SIGKILL at random moments and restarted; then the lake is
settled and checked.

``ICEFLOE_CHAOS_SECONDS`` (default 40) and ``ICEFLOE_CHAOS_SEED`` (default 20261125) are the
knobs; ``make soak`` runs it longer. The schedule of kills follows the seed; what each process
was doing when it died depends on timing, which is the point.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from icefloe.janitor import Janitor
from icefloe.lifecycle import delete_rows
from icefloe.metastore.embedded import stop_embedded
from icefloe.query import QueryEngine
from icefloe.runtime import Runtime
from icefloe.settings import load_settings
from icefloe.spec import SizeTargets, TableSpec
from support.chaos_worker import DOOMED, ROWS_PER_BATCH, SCHEMA, TABLE

pytestmark = pytest.mark.chaos

SECONDS = float(os.environ.get("ICEFLOE_CHAOS_SECONDS", "40"))
SEED = int(os.environ.get("ICEFLOE_CHAOS_SEED", "20261125"))
WORKER = Path(__file__).resolve().parents[1] / "support" / "chaos_worker.py"
ROLES = ("insert-a", "insert-b", "merge", "compact", "gc", "delete", "alter")
PROGRESS_GRACE_S = 90.0
MIN_ACKED = 21
PINNED_SQL = f"SELECT count(*) AS n, sum(v) AS v, count(DISTINCT batch) AS b FROM {TABLE}"


@dataclass
class Slot:
    """One role's process, restarted after every kill."""

    role: str
    env: dict[str, str]
    acked: list[str] = field(default_factory=list)
    attempted: set[str] = field(default_factory=set)
    next_batch: int = 0
    starts: int = 0
    failures: list[str] = field(default_factory=list)
    process: subprocess.Popen[str] | None = None
    _lines: queue.Queue[str | None] = field(default_factory=queue.Queue)

    def start(self) -> None:
        argv = [sys.executable, str(WORKER)]
        if self.role.startswith("insert"):
            slot = self.role.split("-", 1)[1]
            argv += ["insert", slot, str(self.next_batch)]
            # The batch in flight when the last process died is sent again, same key.
            self.attempted.add(f"{slot}-{self.next_batch}")
        else:
            argv.append(self.role)
        self.process = subprocess.Popen(
            argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.starts += 1
        lines: queue.Queue[str | None] = queue.Queue()
        self._lines = lines
        threading.Thread(target=_pump, args=(self.process, lines), daemon=True).start()

    def collect(self) -> None:
        """Take in the acknowledgements printed so far."""
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                return
            if line is None:
                return
            if line.startswith("ACK "):
                key = line.split()[1]
                self.acked.append(key)
                self.next_batch = int(key.rsplit("-", 1)[1]) + 1
                self.attempted.add(f"{key.rsplit('-', 1)[0]}-{self.next_batch}")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self._drain()

    def check_alive(self) -> None:
        """A process that ended by itself (not killed) failed: keep its error."""
        assert self.process is not None
        if self.process.poll() is not None:
            _, err = self.process.communicate()
            self.failures.append(f"{self.role} exited {self.process.returncode}: {err[-2000:]}")
            self._drain()
            self.start()

    def _drain(self) -> None:
        # The pump thread sees EOF once the process is dead; acknowledgements up to the kill
        # still count (they were printed after the commit).
        time.sleep(0.05)
        self.collect()


def _progressed(runtime: Runtime, slots: dict[str, Slot]) -> bool:
    """Whether the inserts acknowledged enough batches and a delete and an alter committed."""
    acked = sum(len(slots[role].acked) for role in ("insert-a", "insert-b"))
    operations = {s.operation for s in runtime.meta.snapshots(TABLE)}
    return acked >= MIN_ACKED and {"delete", "alter"} <= operations


def _pump(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.put(line.strip())
    lines.put(None)


def _cli(env: dict[str, str], *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "icefloe.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_killed_processes_lose_and_duplicate_nothing_and_the_lake_heals(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICEFLOE_")}
    env["ICEFLOE_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(WORKER.parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    _cli(env, "init")
    settings = load_settings({"ICEFLOE_HOME": str(home)}).core
    with Runtime.open(settings) as runtime:
        runtime.meta.create_table(
            TableSpec.create(
                name=TABLE,
                schema=SCHEMA,
                partition_by="day(ts)",
                sizes=SizeTargets(min_files_to_merge=3),
            )
        )
    slots = {role: Slot(role, env) for role in ROLES}
    pinned: dict[int, list[dict[str, object]]] = {}
    kills = 0
    try:
        for slot in slots.values():
            slot.start()
        deadline = time.monotonic() + SECONDS
        next_pin = time.monotonic() + 1.0
        with Runtime.open(settings, max_connections=2) as runtime:
            engine = QueryEngine(meta=runtime.meta, objects=runtime.objects)

            def pin() -> None:
                # An answer at a snapshot, to be asked again at the end.
                snapshot = runtime.meta.resolve_snapshot(TABLE)
                if snapshot and snapshot not in pinned:
                    pinned[snapshot] = engine.query(
                        PINNED_SQL, snapshot_id=snapshot
                    ).rows.to_pylist()

            while time.monotonic() < deadline:
                time.sleep(rng.uniform(0.2, 1.2))
                for slot in slots.values():
                    slot.collect()
                    slot.check_alive()
                victim = slots[rng.choice(ROLES)]
                victim.kill()
                kills += 1
                victim.start()
                if time.monotonic() >= next_pin:
                    pin()
                    next_pin = time.monotonic() + 2.0
            # A busy machine can leave a role without progress in the window (every delete
            # killed before it committed): the processes run on, no longer killed, until
            # each role has made some, for at most PROGRESS_GRACE_S.
            grace_start = time.monotonic()
            while time.monotonic() - grace_start < PROGRESS_GRACE_S and not _progressed(
                runtime, slots
            ):
                time.sleep(0.5)
                for slot in slots.values():
                    slot.collect()
                    slot.check_alive()
                if time.monotonic() >= next_pin:
                    pin()
                    next_pin = time.monotonic() + 2.0
            grace_s = time.monotonic() - grace_start
            # (On a machine slow enough that nothing committed while the kills went on, the
            # answers are pinned while the processes run on after them.)
            if not pinned:
                pin()
            engine.close()
    finally:
        for slot in slots.values():
            if slot.process is not None and slot.process.poll() is None:
                slot.kill()  # the last kill, wherever each process was
            else:
                slot.collect()

    failures = [f for slot in slots.values() for f in slot.failures]
    assert not failures, "\n\n".join(failures)
    acked = [key for role in ("insert-a", "insert-b") for key in slots[role].acked]
    attempted = slots["insert-a"].attempted | slots["insert-b"].attempted
    assert len(acked) >= MIN_ACKED and kills > 10, (len(acked), kills)

    # Settle: a new process can use the meta store (whatever the kills left in its files), and
    # the janitor settles compactions whose processes are gone.
    _cli(env, "status")
    with Runtime.open(settings) as runtime:
        meta, objects = runtime.meta, runtime.objects
        Janitor(meta=meta, objects=objects).run(table=TABLE)
        engine = QueryEngine(meta=meta, objects=objects)
        kept = ROWS_PER_BATCH - 1  # rows of a batch the delete role never touches
        counts = {
            r["batch"]: (r["n"], r["distinct_i"], r["doomed"])
            for r in engine.query(
                f"SELECT batch, count(*) FILTER (WHERE NOT ({DOOMED})) AS n,"
                f" count(DISTINCT i) FILTER (WHERE NOT ({DOOMED})) AS distinct_i,"
                f" count(*) FILTER (WHERE {DOOMED}) AS doomed FROM {TABLE} GROUP BY batch"
            ).rows.to_pylist()
        }
        # Every acknowledged batch is there exactly once (its doomed row once, or deleted)
        assert Counter(acked).most_common(1)[0][1] == 1
        missing = [
            k for k in acked if counts.get(k, (0, 0, 0))[:2] != (kept, kept) or counts[k][2] > 1
        ]
        assert not missing, [(k, counts.get(k)) for k in missing[:10]]
        # Any other batch present was sent, was committed under its key, and is whole
        for key, count in counts.items():
            if key in acked:
                continue
            assert key in attempted, key
            assert count[:2] == (kept, kept) and count[2] <= 1, (key, count)
            assert meta.snapshot_for_key(TABLE, key) is not None, key
        # The deletes committed, and one more (not killed) leaves no doomed row
        assert any(s.operation == "delete" for s in meta.snapshots(TABLE))
        assert any(s.operation == "alter" for s in meta.snapshots(TABLE))
        delete_rows(meta=meta, objects=objects, table=TABLE, where=DOOMED)
        assert engine.query(
            f"SELECT count(*) AS n FROM {TABLE} WHERE {DOOMED}"
        ).rows.to_pylist() == [{"n": 0}]
        # Answers at pinned snapshots are unchanged
        assert pinned
        for snapshot, rows in pinned.items():
            assert engine.query(PINNED_SQL, snapshot_id=snapshot).rows.to_pylist() == rows
        # Snapshot ids have no gaps
        ids = [s.snapshot_id for s in meta.snapshots(TABLE)]
        assert ids == list(range(1, len(ids) + 1))
        head_answer = engine.query(PINNED_SQL).rows.to_pylist()
        engine.close()
        operations = Counter(s.operation for s in meta.snapshots(TABLE))
        print(
            f"chaos: {kills} kills, {sum(s.starts for s in slots.values())} starts,"
            f" {len(acked)} batches acknowledged, {len(counts)} present, snapshots"
            f" {dict(operations)}, {len(pinned)} pinned answers, {grace_s:.1f} s of grace"
        )

        # Once every grace has passed, nothing is left that is neither a live file nor held
        later = datetime.now(UTC) + timedelta(days=2)
        Janitor(meta=meta, objects=objects, clock=lambda: later).run(
            table=TABLE, retention=timedelta(0)
        )
        live = {f.path for f in meta.files(TABLE)}
        data_root = Path(objects.root_uri) / TABLE / "data"
        on_disk = {
            p.relative_to(Path(objects.root_uri)).as_posix()
            for p in data_root.rglob("*")
            if p.is_file()
        }
        assert on_disk == live, sorted(on_disk ^ live)[:10]
        final = QueryEngine(meta=meta, objects=objects)
        assert final.query(PINNED_SQL).rows.to_pylist() == head_answer
        final.close()
    # The embedded meta store is usable to the end, and stops
    _cli(env, "status")
    assert stop_embedded(settings.embedded_database_dir)  # this test's process still uses it
    assert _cli(env, "db", "stop").strip() == "not running"
