"""The core's log lines and spans in Lambda: through the function's Powertools Logger and
Tracer.

The core logs with the standard library (``logging.getLogger("icefloe....")``), so it runs the
same on a laptop. In a function, :func:`route_core_logs` gives the ``icefloe`` logger the
Powertools Logger's handler, formatter and level: every core line then comes out as one JSON
object with the request id and the keys the handler appended, at the level the function's
``POWERTOOLS_LOG_LEVEL`` sets (one setting for the handler's lines and the core's).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.tracing import use_tracer

if TYPE_CHECKING:
    from icefloe.aws.lambda_runtime import Container

CORE_LOGGER = "icefloe"
METRICS_NAMESPACE = "icefloe"
Handler = TypeVar("Handler", bound=Callable[..., Any])
# What Lambda calls: ``lambda_handler(event, context)``, answering a JSON object.
LambdaHandler = Callable[[Any, LambdaContext], dict[str, Any]]


class FunctionHandle(Protocol):
    """A function module's ``handle``: one event, over a container's collaborators."""

    def __call__(
        self, event: Any, *, container: Container, telemetry: FunctionTelemetry
    ) -> dict[str, Any]: ...


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
    routed through them. The Logger and Metrics are built when the handler module loads; the
    Tracer on the first invocation, since building it imports the X-Ray SDK, which makes its
    sampling client (no AWS client is made at import).

    The service name is set on all three, so the metrics carry it as their ``service``
    dimension (the template's alarms watch it) whatever ``POWERTOOLS_SERVICE_NAME`` says.
    """

    def __init__(self, service: str) -> None:
        self.service = service
        self.logger = Logger(service=service)
        self.metrics = Metrics(namespace=METRICS_NAMESPACE, service=service)
        self._tracer: Tracer | None = None
        route_core_logs(self.logger)

    @property
    def tracer(self) -> Tracer:
        """The function's Tracer, built (and the core's spans routed to it) on first use."""
        if self._tracer is None:
            self._tracer = Tracer(service=self.service)
            route_core_spans(self._tracer)
        return self._tracer

    def entry_point(self, handler: Handler) -> Handler:
        """``handler`` with the request id in every log line, a trace, and the metrics flushed
        as one EMF document per invocation (the trace's wrapping made on the first one)."""
        traced: Callable[..., Any] | None = None

        @functools.wraps(handler)
        def with_trace(*args: Any, **kwargs: Any) -> Any:
            nonlocal traced
            if traced is None:
                traced = self.tracer.capture_lambda_handler(handler)
            return traced(*args, **kwargs)

        return cast(
            Handler, self.logger.inject_lambda_context(self.metrics.log_metrics(with_trace))
        )

    def handler(self, handle: FunctionHandle, *, container: Container) -> LambdaHandler:
        """What Lambda calls (:meth:`entry_point`): ``handle`` over ``container``'s
        collaborators, with this telemetry."""

        @self.entry_point
        def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
            return handle(event, container=container, telemetry=self)

        return lambda_handler

    def count(self, name: str, value: int) -> None:
        self.metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)

    def count_bytes(self, name: str, value: int) -> None:
        self.metrics.add_metric(name=name, unit=MetricUnit.Bytes, value=value)
