"""What ``template.yaml`` declares, read for tests: queues, functions and their event sources
(SQS, schedules, EventBridge rules), the data bucket, IAM policy statements.

Tests build their moto resources from these declarations (see :mod:`support.aws`) and check
rules over them, so tests and infrastructure cannot drift apart.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO_ROOT / "template.yaml"
SAM_DEFAULT_TIMEOUT = 3  # seconds, when neither the function nor Globals sets one

_SHORT_TAGS = (
    "Base64",
    "Cidr",
    "Condition",
    "Equals",
    "FindInMap",
    "GetAZs",
    "If",
    "ImportValue",
    "Join",
    "Not",
    "And",
    "Or",
    "Select",
    "Split",
    "Sub",
    "Transform",
)


class CfnLoader(yaml.SafeLoader):
    """Safe YAML loader that turns CloudFormation short tags into their long form
    (``!Ref X`` -> ``{"Ref": "X"}``, ``!GetAtt A.B`` -> ``{"Fn::GetAtt": ["A", "B"]}``)."""


def _construct(loader: yaml.SafeLoader, node: yaml.Node) -> object:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    assert isinstance(node, yaml.MappingNode)
    return loader.construct_mapping(node, deep=True)


def _ref(loader: yaml.SafeLoader, node: yaml.Node) -> object:
    return {"Ref": _construct(loader, node)}


def _get_att(loader: yaml.SafeLoader, node: yaml.Node) -> object:
    value = _construct(loader, node)
    if isinstance(value, str):
        logical_id, _, attribute = value.partition(".")
        value = [logical_id, attribute]
    return {"Fn::GetAtt": value}


def _function(name: str) -> Any:
    key = "Condition" if name == "Condition" else f"Fn::{name}"
    return lambda loader, node: {key: _construct(loader, node)}


CfnLoader.add_constructor("!Ref", _ref)
CfnLoader.add_constructor("!GetAtt", _get_att)
for _tag in _SHORT_TAGS:
    CfnLoader.add_constructor(f"!{_tag}", _function(_tag))


@dataclass(frozen=True)
class QueueDecl:
    """An ``AWS::SQS::Queue``; ``None`` where the template leaves the SQS default."""

    logical_id: str
    properties: Mapping[str, Any]
    visibility_timeout: int | None
    message_retention_period: int | None
    dead_letter_target: str | None  # logical id of the redrive target
    max_receive_count: int | None


@dataclass(frozen=True)
class SqsEventDecl:
    """An SQS event source of a function: a SAM ``SQS`` event, or an
    ``AWS::Lambda::EventSourceMapping`` from a queue (``name`` is then its logical id)."""

    name: str
    queue: str  # logical id
    batch_size: int | None
    batching_window: int | None
    function_response_types: tuple[str, ...]
    properties: Mapping[str, Any]
    maximum_concurrency: int | None = None  # ScalingConfig.MaximumConcurrency


SCHEDULE_EVENT_TYPES = ("ScheduleV2", "Schedule")


@dataclass(frozen=True)
class ScheduleEventDecl:
    """A schedule event of a function: EventBridge Scheduler (``ScheduleV2``) or an
    EventBridge rule (``Schedule``)."""

    name: str
    type: str
    expression: str  # parameters resolved to their defaults
    input: str | None  # the JSON the function is invoked with, when declared
    properties: Mapping[str, Any]


@dataclass(frozen=True)
class EventRuleDecl:
    """An EventBridge rule event of a function (SAM ``EventBridgeRule``): the events whose
    pattern matches invoke it."""

    name: str
    pattern: Mapping[str, Any]
    properties: Mapping[str, Any]


@dataclass(frozen=True)
class FunctionDecl:
    """An ``AWS::Serverless::Function`` with Globals applied."""

    logical_id: str
    code_uri: str
    handler: str
    timeout: int
    environment: Mapping[str, Any]
    events: Mapping[str, Any]
    sqs_events: tuple[SqsEventDecl, ...] = field(default=())
    schedules: tuple[ScheduleEventDecl, ...] = field(default=())
    memory_size: int | None = None  # MB; None where SAM's default applies
    event_rules: tuple[EventRuleDecl, ...] = field(default=())

    @property
    def handler_file(self) -> Path:
        module, _, _ = self.handler.rpartition(".")
        return REPO_ROOT / self.code_uri / (module.replace(".", "/") + ".py")

    @property
    def handler_name(self) -> str:
        return self.handler.rpartition(".")[2]


@dataclass(frozen=True)
class BucketDecl:
    logical_id: str
    properties: Mapping[str, Any]


@dataclass(frozen=True)
class Template:
    """The parsed template and typed views of what the tests need."""

    raw: Mapping[str, Any]

    @property
    def resources(self) -> Mapping[str, Mapping[str, Any]]:
        resources: Mapping[str, Mapping[str, Any]] = self.raw.get("Resources", {})
        return resources

    def of_type(self, resource_type: str) -> dict[str, Mapping[str, Any]]:
        return {
            logical_id: resource.get("Properties", {})
            for logical_id, resource in self.resources.items()
            if resource.get("Type") == resource_type
        }

    def parameter_default(self, name: str) -> Any:
        return self.raw["Parameters"][name]["Default"]

    def resolve(self, value: Any) -> Any:
        """``{"Ref": Parameter}`` becomes the parameter's default; anything else is returned."""
        if isinstance(value, Mapping) and set(value) == {"Ref"}:
            name = value["Ref"]
            if name in self.raw.get("Parameters", {}):
                return self.parameter_default(name)
        return value

    def logical_id_of(self, value: Any) -> str:
        """The logical id behind ``!Ref X`` or ``!GetAtt X.Attr``."""
        if isinstance(value, Mapping):
            if "Ref" in value:
                return str(value["Ref"])
            if "Fn::GetAtt" in value:
                return str(value["Fn::GetAtt"][0])
        raise ValueError(f"not a reference to a resource: {value!r}")

    def queues(self) -> dict[str, QueueDecl]:
        queues = {}
        for logical_id, props in self.of_type("AWS::SQS::Queue").items():
            redrive = props.get("RedrivePolicy") or {}
            target = redrive.get("deadLetterTargetArn")
            queues[logical_id] = QueueDecl(
                logical_id=logical_id,
                properties=props,
                visibility_timeout=_int_or_none(self.resolve(props.get("VisibilityTimeout"))),
                message_retention_period=_int_or_none(
                    self.resolve(props.get("MessageRetentionPeriod"))
                ),
                dead_letter_target=self.logical_id_of(target) if target is not None else None,
                max_receive_count=_int_or_none(self.resolve(redrive.get("maxReceiveCount"))),
            )
        return queues

    def functions(self) -> dict[str, FunctionDecl]:
        globals_ = self.raw.get("Globals", {}).get("Function", {})
        functions = {}
        for logical_id, props in self.of_type("AWS::Serverless::Function").items():
            events = props.get("Events") or {}
            environment = {
                **(globals_.get("Environment", {}).get("Variables") or {}),
                **(props.get("Environment", {}).get("Variables") or {}),
            }
            functions[logical_id] = FunctionDecl(
                logical_id=logical_id,
                code_uri=str(props.get("CodeUri", globals_.get("CodeUri", ""))),
                handler=str(props.get("Handler", globals_.get("Handler", ""))),
                timeout=int(props.get("Timeout", globals_.get("Timeout", SAM_DEFAULT_TIMEOUT))),
                environment=environment,
                events=events,
                sqs_events=tuple(
                    self._sqs_event(name, event["Properties"])
                    for name, event in events.items()
                    if event.get("Type") == "SQS"
                )
                + self._event_source_mappings(logical_id),
                schedules=tuple(
                    self._schedule_event(name, event)
                    for name, event in events.items()
                    if event.get("Type") in SCHEDULE_EVENT_TYPES
                ),
                memory_size=_int_or_none(
                    self.resolve(props.get("MemorySize", globals_.get("MemorySize")))
                ),
                event_rules=tuple(
                    EventRuleDecl(
                        name=name,
                        pattern=event["Properties"]["Pattern"],
                        properties=event["Properties"],
                    )
                    for name, event in events.items()
                    if event.get("Type") == "EventBridgeRule"
                ),
            )
        return functions

    def statements(self, logical_id: str) -> list[Mapping[str, Any]]:
        """The IAM statements a function's inline ``Policies`` or a role's ``Policies`` grant
        (SAM policy templates such as ``SQSSendMessagePolicy`` are not expanded)."""
        resource = self.resources[logical_id]
        policies = resource.get("Properties", {}).get("Policies") or []
        statements: list[Mapping[str, Any]] = []
        for policy in policies if isinstance(policies, list) else [policies]:
            if not isinstance(policy, Mapping):
                continue
            document = policy.get("PolicyDocument", policy)  # a role's, or a function's inline
            statements.extend(document.get("Statement") or [])
        return statements

    def _schedule_event(self, name: str, event: Mapping[str, Any]) -> ScheduleEventDecl:
        props = event.get("Properties") or {}
        raw_input = self.resolve(props.get("Input"))
        return ScheduleEventDecl(
            name=name,
            type=str(event["Type"]),
            expression=str(self.resolve(props.get("ScheduleExpression") or props.get("Schedule"))),
            input=None if raw_input is None else str(raw_input),
            properties=props,
        )

    def _event_source_mappings(self, function: str) -> tuple[SqsEventDecl, ...]:
        """The ``AWS::Lambda::EventSourceMapping`` resources from a queue of this template to
        ``function``, in the shape of SAM SQS events."""
        return tuple(
            self._sqs_event(logical_id, props)
            for logical_id, props in self.of_type("AWS::Lambda::EventSourceMapping").items()
            if self.logical_id_of(props["FunctionName"]) == function
            and self.logical_id_of(props["EventSourceArn"]) in self.of_type("AWS::SQS::Queue")
        )

    def _sqs_event(self, name: str, props: Mapping[str, Any]) -> SqsEventDecl:
        return SqsEventDecl(
            name=name,
            queue=self.logical_id_of(props.get("Queue") or props["EventSourceArn"]),
            batch_size=_int_or_none(self.resolve(props.get("BatchSize"))),
            batching_window=_int_or_none(self.resolve(props.get("MaximumBatchingWindowInSeconds"))),
            function_response_types=tuple(props.get("FunctionResponseTypes") or ()),
            properties=props,
            maximum_concurrency=_int_or_none(
                self.resolve((props.get("ScalingConfig") or {}).get("MaximumConcurrency"))
            ),
        )

    def consumers(self) -> dict[str, list[FunctionDecl]]:
        """Queue logical id -> the functions whose SQS event sources read it."""
        consumers: dict[str, list[FunctionDecl]] = {}
        for function in self.functions().values():
            for event in function.sqs_events:
                consumers.setdefault(event.queue, []).append(function)
        return consumers

    def bucket(self, logical_id: str = "DataBucket") -> BucketDecl:
        return BucketDecl(logical_id, self.of_type("AWS::S3::Bucket")[logical_id])


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


@cache
def sam_expanded(path: Path = TEMPLATE_PATH) -> Mapping[str, Any]:
    """The template as CloudFormation sees it after the SAM transform (samtranslator, offline):
    the roles SAM writes for the functions, with the managed policies it attaches.

    Code locations become placeholder S3 URIs (the transform wants them uploaded), and managed
    policy names are not resolved to ARNs (SAM's own ones are fixed ARNs anyway).
    """
    import json
    import os

    from cfnlint.decode import decode
    from samtranslator.translator.transform import transform

    decoded, problems = decode(str(path))
    assert decoded is not None, problems
    template = json.loads(json.dumps(decoded))
    for resource in template["Resources"].values():
        props = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if key in props:
                props[key] = "s3://placeholder-bucket/placeholder-key"

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    parameters = {"DatabaseSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:x"}
    region = os.environ.get("AWS_DEFAULT_REGION")
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"  # the transform resolves AWS::Region
    try:
        expanded: Mapping[str, Any] = transform(template, parameters, NoManagedPolicies())
    finally:
        if region is None:
            del os.environ["AWS_DEFAULT_REGION"]
        else:
            os.environ["AWS_DEFAULT_REGION"] = region
    return expanded


@cache
def load_template(path: Path = TEMPLATE_PATH) -> Template:
    with open(path, encoding="utf-8") as f:
        return Template(yaml.load(f, Loader=CfnLoader))


def import_handler_module(function: FunctionDecl) -> ModuleType:
    """Import a function's handler file by path (``functions/`` is not a package)."""
    path = function.handler_file
    spec = importlib.util.spec_from_file_location(f"icefloe_fn_{function.logical_id}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
