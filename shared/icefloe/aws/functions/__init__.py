"""What each Lambda function does, one module per function; ``functions/<name>/app.py`` only
wires a module's ``handle`` to Powertools, over a container.

Each ``handle(event, *, container, telemetry)`` parses its event into a typed model
(:mod:`icefloe.aws.events`), calls the core with the collaborators the container
(:class:`icefloe.aws.lambda_runtime.Container`) built on its first invocation, reports what
happened (log lines and metrics), and answers. A refused event is answered with
:func:`icefloe.aws.events.error_answer`; a failure of the system (meta store, object store, a
queue) raises, so that Lambda retries.
"""
