"""The core's log lines and spans in Lambda: through the function's Powertools Logger and
Tracer.

The core logs with the standard library (``logging.getLogger("icefloe....")``), so it runs the
same on a laptop. In a function, :func:`route_core_logs` gives the ``icefloe`` logger the
Powertools Logger's handler, formatter and level: every core line then comes out as one JSON
object with the request id and the keys the handler appended, at the level the function's
``POWERTOOLS_LOG_LEVEL`` sets (one setting for the handler's lines and the core's).
"""

from __future__ import annotations

import logging

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from icefloe.tracing import use_tracer

CORE_LOGGER = "icefloe"


def route_core_logs(logger: Logger) -> None:
    """Send the core's log records through ``logger`` (call once, when the handler loads)."""
    core = logging.getLogger(CORE_LOGGER)  # exists as a logger, not only as a placeholder
    copy_config_to_registered_loggers(source_logger=logger, include={CORE_LOGGER})
    core.propagate = False  # one line per record: the root logger must not print it again


def route_core_spans(tracer: Tracer) -> None:
    """Make the core's spans (:mod:`icefloe.tracing`) subsegments of ``tracer``'s trace; with
    tracing disabled (``POWERTOOLS_TRACE_DISABLED``) they stay no-ops."""
    use_tracer(None if tracer.disabled else (lambda name: tracer.provider.in_subsegment(name=name)))
