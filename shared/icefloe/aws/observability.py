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
from collections.abc import Callable
from typing import Any, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit

from icefloe.tracing import use_tracer

CORE_LOGGER = "icefloe"
METRICS_NAMESPACE = "icefloe"
Handler = TypeVar("Handler", bound=Callable[..., Any])


def route_core_logs(logger: Logger) -> None:
    """Send the core's log records through ``logger`` (call once, when the handler loads)."""
    core = logging.getLogger(CORE_LOGGER)  # exists as a logger, not only as a placeholder
    copy_config_to_registered_loggers(source_logger=logger, include={CORE_LOGGER})
    core.propagate = False  # one line per record: the root logger must not print it again


def route_core_spans(tracer: Tracer) -> None:
    """Make the core's spans (:mod:`icefloe.tracing`) subsegments of ``tracer``'s trace; with
    tracing disabled (``POWERTOOLS_TRACE_DISABLED``) they stay no-ops."""
    use_tracer(None if tracer.disabled else (lambda name: tracer.provider.in_subsegment(name=name)))


class FunctionTelemetry:
    """One function's Powertools Logger, Metrics and Tracer, with the core's logs and spans
    routed through them; built once when the handler module loads.

    The service name is set on all three, so the metrics carry it as their ``service``
    dimension (the template's alarms watch it) whatever ``POWERTOOLS_SERVICE_NAME`` says.
    """

    def __init__(self, service: str) -> None:
        self.logger = Logger(service=service)
        self.metrics = Metrics(namespace=METRICS_NAMESPACE, service=service)
        self.tracer = Tracer(service=service)
        route_core_logs(self.logger)
        route_core_spans(self.tracer)

    def entry_point(self, handler: Handler) -> Handler:
        """``handler`` with the request id in every log line, a trace, and the metrics flushed
        as one EMF document per invocation."""
        traced = self.tracer.capture_lambda_handler(handler)
        return cast(Handler, self.logger.inject_lambda_context(self.metrics.log_metrics(traced)))

    def count(self, name: str, value: int) -> None:
        self.metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)

    def count_bytes(self, name: str, value: int) -> None:
        self.metrics.add_metric(name=name, unit=MetricUnit.Bytes, value=value)
