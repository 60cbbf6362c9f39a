"""Named spans around the core's phases, for traces where a process wants them.

The core does not depend on a tracer: it marks its phases with :func:`span` (a commit, an
insert's load and write, a merge, a delete part, a Spark compaction, a query's planning and
execution), and a process that traces installs an opener with :func:`use_tracer`. The Lambda
functions install Powertools' Tracer, so each phase is an X-Ray subsegment under the handler's;
elsewhere a span costs one global lookup. Spans are opened on the thread that does the work (X-Ray's context is
per thread).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

SpanOpener = Callable[[str], AbstractContextManager[object]]

_opener: SpanOpener | None = None


def use_tracer(opener: SpanOpener | None) -> None:
    """Open every later span with ``opener`` (None: spans do nothing again)."""
    global _opener
    _opener = opener


@contextmanager
def span(name: str) -> Iterator[None]:
    """A span named ``name`` (``icefloe.<phase>``) around the block, if a tracer is installed."""
    opener = _opener
    if opener is None:
        yield
        return
    with opener(name):
        yield
