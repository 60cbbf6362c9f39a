"""Rules every function and queue in template.yaml must follow (no AWS, no database)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from icefloe.compaction import DEFAULT_COMPACTION_LEASE
from icefloe.compaction.tracking import TERMINAL_STATES
from icefloe.janitor import ORPHAN_GRACE_FLOOR
from support.template import (
    REPO_ROOT,
    FunctionDecl,
    import_handler_module,
    load_template,
    sam_expanded,
)

TEMPLATE = load_template()
FUNCTIONS = TEMPLATE.functions()
QUEUES = TEMPLATE.queues()
CONSUMERS = TEMPLATE.consumers()
SQS_DEFAULT_VISIBILITY_TIMEOUT = 30
SQS_DEFAULT_RETENTION = 345_600
# Functions that only a schedule runs (besides direct invokes by an operator).
SCHEDULED_FUNCTIONS = ("MergeOrchestratorFunction", "JanitorFunction", "PublisherFunction")
MERGE_FUNCTIONS = ("MergeOrchestratorFunction", "MergeWorkerFunction")
SCHEDULE_EXPRESSION = re.compile(
    r"^(rate\(\d+ (minute|minutes|hour|hours|day|days)\)|cron\(.+\)|at\(.+\))$"
)
EMR_APPLICATION = "CompactionApplication"
JOB_ROLE = "CompactionJobRole"
EMR_SERVICE = "emr-serverless.amazonaws.com"
# Functions that need the application's id: to start jobs, to ask about them, to match events.
EMR_FUNCTIONS = ("MergeOrchestratorFunction", "JanitorFunction", "CompactionEventsFunction")


def test_the_template_declares_functions_and_consumed_queues() -> None:
    # Guards the rules below against passing vacuously on an empty template.
    assert FUNCTIONS and CONSUMERS


@pytest.mark.parametrize("function", FUNCTIONS.values(), ids=list(FUNCTIONS))
def test_every_sqs_event_source_reports_partial_batch_failures(function: FunctionDecl) -> None:
    for event in function.sqs_events:
        assert "ReportBatchItemFailures" in event.function_response_types, event.name


@pytest.mark.parametrize("function", FUNCTIONS.values(), ids=list(FUNCTIONS))
def test_sqs_batches_over_ten_messages_have_a_batching_window(function: FunctionDecl) -> None:
    # Lambda refuses a BatchSize over 10 on a standard queue without a batching window.
    for event in function.sqs_events:
        if (event.batch_size or 10) > 10:
            assert (event.batching_window or 0) >= 1, event.name


@pytest.mark.parametrize("function", FUNCTIONS.values(), ids=list(FUNCTIONS))
def test_every_sqs_event_source_caps_its_concurrency(function: FunctionDecl) -> None:
    # Without a cap a backlog scales pollers up to the account's limit, and every invocation
    # holds meta store connections: the database, not Lambda, would give out first.
    for event in function.sqs_events:
        assert event.maximum_concurrency is not None, (function.logical_id, event.name)
        assert 2 <= event.maximum_concurrency <= 1000, (function.logical_id, event.name)


def test_the_merge_worker_reads_the_queue_the_orchestrator_sends_to() -> None:
    orchestrator = FUNCTIONS["MergeOrchestratorFunction"]
    (source,) = FUNCTIONS["MergeWorkerFunction"].sqs_events
    assert TEMPLATE.logical_id_of(orchestrator.environment["ICEFLOE_MERGE_QUEUE_URL"]) == (
        source.queue
    )
    assert source.maximum_concurrency is not None  # the merge worker is capped too
    assert source.batch_size == 1  # one merge per invocation: a merge takes minutes and memory


def test_scheduled_functions_have_a_schedule_event() -> None:
    assert "MergeOrchestratorFunction" in FUNCTIONS
    for logical_id in SCHEDULED_FUNCTIONS:
        if logical_id not in FUNCTIONS:
            continue
        schedules = FUNCTIONS[logical_id].schedules
        assert schedules, f"{logical_id} has no Schedule or ScheduleV2 event"
        for schedule in schedules:
            assert SCHEDULE_EXPRESSION.match(schedule.expression), schedule.expression
            if schedule.input is not None:  # what the handler is invoked with
                assert isinstance(json.loads(schedule.input), dict), schedule.name


def test_the_merge_lease_outlasts_the_merge_worker_timeout() -> None:
    # A claim that ran out during a merge lets the orchestrator hand the same files to a
    # second worker; one of the two then fails its commit and its work is wasted.
    worker_timeout = FUNCTIONS["MergeWorkerFunction"].timeout
    leases = set()
    for logical_id in MERGE_FUNCTIONS:
        value = FUNCTIONS[logical_id].environment["ICEFLOE_MERGE_LEASE_SECONDS"]
        leases.add(int(TEMPLATE.resolve(value)))
        parameter = TEMPLATE.raw["Parameters"].get(TEMPLATE.logical_id_of(value))
        if parameter is not None:  # whatever a deployer chooses
            assert int(parameter["MinValue"]) > worker_timeout
    (lease,) = leases  # the orchestrator claims with the lease the worker renews with
    assert lease > worker_timeout


def test_the_orphan_grace_floor_outlasts_every_function_timeout() -> None:
    # A writer uploads, then commits; the sweep must never see its object as an orphan in
    # between. Every writer here is a function, stopped at its timeout.
    for function in FUNCTIONS.values():
        assert function.timeout < ORPHAN_GRACE_FLOOR.total_seconds(), function.logical_id


def _actions(statement: Mapping[str, Any]) -> set[str]:
    action = statement["Action"]
    return set(action) if isinstance(action, list) else {action}


def _resources(statement: Mapping[str, Any]) -> list[Any]:
    resource = statement["Resource"]
    return resource if isinstance(resource, list) else [resource]


def _s3_statements(logical_id: str) -> list[Mapping[str, Any]]:
    return [
        s for s in TEMPLATE.statements(logical_id) if all(a.startswith("s3:") for a in _actions(s))
    ]


def _granting(prefix: str) -> dict[str, list[Mapping[str, Any]]]:
    """Logical id -> its statements with an action starting with ``prefix``, over every
    function and role."""
    holders = [*FUNCTIONS, *TEMPLATE.of_type("AWS::IAM::Role")]
    granting = {
        logical_id: [
            s
            for s in TEMPLATE.statements(logical_id)
            if any(a.startswith(prefix) for a in _actions(s))
        ]
        for logical_id in holders
    }
    return {logical_id: found for logical_id, found in granting.items() if found}


def test_the_janitor_may_only_list_read_and_delete_data_objects() -> None:
    assert "JanitorFunction" in FUNCTIONS
    prefix = "${WarehousePrefix}/*"
    granted: set[str] = set()
    for statement in _s3_statements("JanitorFunction"):
        assert statement["Effect"] == "Allow"
        actions = _actions(statement)
        granted |= actions
        if actions == {"s3:ListBucket"}:
            # Listing the bucket is scoped to the warehouse: never the results, never all
            assert statement["Resource"] == {"Fn::GetAtt": ["DataBucket", "Arn"]}
            assert statement["Condition"] == {"StringLike": {"s3:prefix": {"Fn::Sub": prefix}}}
        elif actions == {"s3:ListBucketMultipartUploads"}:
            # Unfinished uploads' keys and ids (no data); S3 has no prefix condition for it
            assert statement["Resource"] == {"Fn::GetAtt": ["DataBucket", "Arn"]}
        else:
            assert actions <= {"s3:GetObject", "s3:DeleteObject", "s3:AbortMultipartUpload"}
            assert statement["Resource"] == {"Fn::Sub": "${DataBucket.Arn}/" + prefix}
    assert granted == {
        "s3:ListBucket",
        "s3:GetObject",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
        "s3:ListBucketMultipartUploads",
    }


def test_the_bucket_aborts_uploads_left_unfinished_for_a_day() -> None:
    rules = TEMPLATE.resources["DataBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    aborting = [r for r in rules if "AbortIncompleteMultipartUpload" in r]
    assert len(aborting) == 1
    (rule,) = aborting
    assert rule["Status"] == "Enabled" and "Prefix" not in rule and "Filter" not in rule
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}


def test_the_compaction_job_role_is_assumed_and_passed_only_by_emr_serverless() -> None:
    role = TEMPLATE.resources[JOB_ROLE]
    assert role["Type"] == "AWS::IAM::Role"
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Effect"] == "Allow" and trust["Action"] == "sts:AssumeRole"
    assert trust["Principal"] == {"Service": EMR_SERVICE}
    # Only the orchestrator may pass a role, only this one, and only to EMR Serverless.
    passing = _granting("iam:")
    assert set(passing) == {"MergeOrchestratorFunction"}
    for statement in passing["MergeOrchestratorFunction"]:
        assert _actions(statement) == {"iam:PassRole"}
        assert [TEMPLATE.logical_id_of(r) for r in _resources(statement)] == [JOB_ROLE]
        assert statement["Condition"] == {"StringEquals": {"iam:PassedToService": EMR_SERVICE}}


def test_the_orchestrator_may_start_jobs_only_on_the_declared_application() -> None:
    assert TEMPLATE.resources[EMR_APPLICATION]["Type"] == "AWS::EMRServerless::Application"
    application_arn = {"Fn::GetAtt": [EMR_APPLICATION, "Arn"]}
    job_runs = {"Fn::Sub": "${" + EMR_APPLICATION + ".Arn}/jobruns/*"}
    granting = _granting("emr-serverless:")
    starting = {
        logical_id
        for logical_id, statements in granting.items()
        if any("emr-serverless:StartJobRun" in _actions(s) for s in statements)
    }
    assert starting == {"MergeOrchestratorFunction"}
    for logical_id, statements in granting.items():
        for statement in statements:
            assert all(r in (application_arn, job_runs) for r in _resources(statement)), (
                logical_id,
                statement["Resource"],
            )
    (janitor,) = granting["JanitorFunction"]  # it asks about job runs, nothing more
    assert _actions(janitor) == {"emr-serverless:GetJobRun"} and _resources(janitor) == [job_runs]
    assert "CompactionEventsFunction" not in granting  # the event carries what it needs


def test_the_functions_use_the_declared_application_and_job_role() -> None:
    application_id = {"Fn::GetAtt": [EMR_APPLICATION, "ApplicationId"]}
    for logical_id in EMR_FUNCTIONS:
        assert FUNCTIONS[logical_id].environment["ICEFLOE_EMR_APPLICATION_ID"] == application_id
    orchestrator = FUNCTIONS["MergeOrchestratorFunction"].environment
    assert TEMPLATE.logical_id_of(orchestrator["ICEFLOE_EMR_JOB_ROLE_ARN"]) == JOB_ROLE
    # The job's entry point and environment are where the job role may read them.
    artifacts = "s3://${DataBucket}/${ArtifactsPrefix}/"
    assert orchestrator["ICEFLOE_EMR_ENTRY_POINT"] == {"Fn::Sub": artifacts + "compact_job.py"}
    assert orchestrator["ICEFLOE_EMR_ENVIRONMENT_ARCHIVE"] == {
        "Fn::Sub": artifacts + "icefloe-env.tar.gz"
    }
    readable = {
        r["Fn::Sub"]
        for s in _s3_statements(JOB_ROLE)
        if "s3:GetObject" in _actions(s)
        for r in _resources(s)
    }
    assert "${DataBucket.Arn}/${ArtifactsPrefix}/*" in readable


def test_the_job_state_rule_targets_the_events_function_for_terminal_states_only() -> None:
    targets = {
        logical_id: function.event_rules
        for logical_id, function in FUNCTIONS.items()
        if function.event_rules
    }
    assert set(targets) == {"CompactionEventsFunction"}
    assert FUNCTIONS["CompactionEventsFunction"].code_uri == "functions/compaction_events/"
    (rule,) = targets["CompactionEventsFunction"]
    pattern = rule.pattern
    assert pattern["source"] == ["aws.emr-serverless"]
    assert pattern["detail-type"] == ["EMR Serverless Job Run State Change"]
    assert pattern["detail"]["applicationId"] == [
        {"Fn::GetAtt": [EMR_APPLICATION, "ApplicationId"]}
    ]
    # The states the core settles a job on: no more (it would ignore them), no fewer.
    assert set(pattern["detail"]["state"]) == TERMINAL_STATES


def test_a_compaction_job_ends_before_the_lease_on_its_files() -> None:
    # A job still running when its claims lapse has its partitions claimed by a later run (and
    # the janitor settles it as abandoned): its commits then conflict and its work is wasted.
    value = FUNCTIONS["MergeOrchestratorFunction"].environment["ICEFLOE_EMR_JOB_TIMEOUT_MINUTES"]
    parameter = TEMPLATE.raw["Parameters"][TEMPLATE.logical_id_of(value)]
    assert int(parameter["Default"]) <= int(parameter["MaxValue"])
    assert int(parameter["MaxValue"]) * 60 < DEFAULT_COMPACTION_LEASE.total_seconds()


def test_the_compaction_job_sees_the_warehouse_and_meta_store_of_the_functions() -> None:
    globals_ = TEMPLATE.raw["Globals"]["Function"]["Environment"]["Variables"]
    (defaults,) = [
        c
        for c in TEMPLATE.resources[EMR_APPLICATION]["Properties"]["RuntimeConfiguration"]
        if c["Classification"] == "spark-defaults"
    ]
    driver_env = {
        name.removeprefix("spark.emr-serverless.driverEnv."): value
        for name, value in defaults["Properties"].items()
        if name.startswith("spark.emr-serverless.driverEnv.")
    }
    for name in ("ICEFLOE_WAREHOUSE", "ICEFLOE_DATABASE_SECRET_ARN", "ICEFLOE_DATABASE_SCHEMA"):
        assert driver_env[name] == globals_[name], name
    assert driver_env["AWS_REGION"] == {"Ref": "AWS::Region"}


def test_the_job_role_touches_only_the_warehouse_its_artifacts_logs_and_spark_results() -> None:
    # Big-scan query jobs write Parquet under results/spark/<job id>/, never elsewhere under
    # results/ (where the query function's links live).
    allowed = {
        "${DataBucket.Arn}/${WarehousePrefix}/*",
        "${DataBucket.Arn}/${ArtifactsPrefix}/*",
        "${DataBucket.Arn}/${ArtifactsPrefix}/logs/*",
        "${DataBucket.Arn}/results/spark/*",
    }
    writes = set()
    for statement in _s3_statements(JOB_ROLE):
        if _actions(statement) == {"s3:ListBucket"}:
            assert statement["Resource"] == {"Fn::GetAtt": ["DataBucket", "Arn"]}
            prefixes = statement["Condition"]["StringLike"]["s3:prefix"]
            assert prefixes == [
                {"Ref": "WarehousePrefix"},
                {"Fn::Sub": "${WarehousePrefix}/*"},
                "results/spark/*",
            ]
            continue
        for resource in _resources(statement):
            assert resource["Fn::Sub"] in allowed, resource
            if _actions(statement) & {"s3:PutObject", "s3:DeleteObject"}:
                writes.add(resource["Fn::Sub"])
    # It never writes where its code is read from.
    assert "${DataBucket.Arn}/${ArtifactsPrefix}/*" not in writes
    for statement in TEMPLATE.statements(JOB_ROLE):
        assert all("*" not in a for a in _actions(statement)), statement


def test_the_compaction_events_function_failing_raises_an_alarm() -> None:
    alarms = [
        props
        for props in TEMPLATE.of_type("AWS::CloudWatch::Alarm").values()
        if props.get("MetricName") == "Errors"
        and any(
            TEMPLATE.logical_id_of(d["Value"]) == "CompactionEventsFunction"
            for d in props.get("Dimensions", [])
        )
    ]
    assert alarms, "no alarm on the compaction events function's Errors"


def test_the_janitor_failing_raises_an_alarm() -> None:
    assert "JanitorFunction" in FUNCTIONS
    alarms = [
        props
        for props in TEMPLATE.of_type("AWS::CloudWatch::Alarm").values()
        if props.get("Namespace") == "AWS/Lambda"
        and props.get("MetricName") == "Errors"
        and any(
            d["Name"] == "FunctionName" and TEMPLATE.logical_id_of(d["Value"]) == "JanitorFunction"
            for d in props.get("Dimensions", [])
        )
    ]
    assert alarms, "no alarm on the janitor's Errors"
    for alarm in alarms:
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold" and alarm["Threshold"] == 0


@pytest.mark.parametrize("queue", sorted(CONSUMERS))
def test_every_consumed_queue_redrives_to_a_dead_letter_queue_that_outlives_it(queue: str) -> None:
    decl = QUEUES[queue]
    assert decl.dead_letter_target in QUEUES, f"{queue} has no RedrivePolicy to a declared queue"
    assert decl.max_receive_count is not None and decl.max_receive_count >= 1
    dlq = QUEUES[decl.dead_letter_target]
    assert dlq.logical_id not in CONSUMERS, "a DLQ that a function drains hides poison messages"
    # A moved message keeps its first enqueue time: the DLQ must retain it longer.
    source_retention = decl.message_retention_period or SQS_DEFAULT_RETENTION
    assert (dlq.message_retention_period or SQS_DEFAULT_RETENTION) > source_retention


@pytest.mark.parametrize("queue", sorted(CONSUMERS))
def test_visibility_timeout_is_at_least_six_times_each_consumers_timeout(queue: str) -> None:
    visibility = QUEUES[queue].visibility_timeout or SQS_DEFAULT_VISIBILITY_TIMEOUT
    for function in CONSUMERS[queue]:
        assert visibility >= 6 * function.timeout, (queue, function.logical_id)


@pytest.mark.parametrize("queue", sorted(CONSUMERS))
def test_every_dead_letter_queue_has_an_alarm_on_visible_messages(queue: str) -> None:
    dlq = QUEUES[queue].dead_letter_target
    alarms = [
        props
        for props in TEMPLATE.of_type("AWS::CloudWatch::Alarm").values()
        if props.get("MetricName") == "ApproximateNumberOfMessagesVisible"
        and props.get("Namespace") == "AWS/SQS"
        and any(TEMPLATE.logical_id_of(d["Value"]) == dlq for d in props.get("Dimensions", []))
    ]
    assert alarms, f"no alarm on {dlq}"
    for alarm in alarms:
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold" and alarm["Threshold"] == 0


@pytest.mark.parametrize("function", FUNCTIONS.values(), ids=list(FUNCTIONS))
def test_every_function_handler_file_exists_and_imports(function: FunctionDecl) -> None:
    assert function.handler_file.is_file(), function.handler_file
    module = import_handler_module(function)
    assert callable(getattr(module, function.handler_name, None)), function.handler


# What a handler file may import: Powertools' typing, the function's module, its telemetry and
# the container its collaborators come from. Everything the function decides lives in
# icefloe.aws.functions.<name>, where it is tested like the rest of the core.
HANDLER_IMPORTS = frozenset(
    {
        "__future__",
        "typing",
        "aws_lambda_powertools.utilities.typing",
        "icefloe.aws.functions",
        "icefloe.aws.lambda_runtime",
        "icefloe.aws.observability",
    }
)


@pytest.mark.parametrize("function", FUNCTIONS.values(), ids=list(FUNCTIONS))
def test_every_handler_is_thin(function: FunctionDecl) -> None:
    source = function.handler_file.read_text()
    assert len(source.splitlines()) <= 60, f"{function.handler_file} is over 60 lines"
    tree = ast.parse(source)
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert imported <= HANDLER_IMPORTS, imported - HANDLER_IMPORTS
    # One function, which makes the handler over a container (a test passes its own);
    # nothing else for tests to call.
    functions = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert functions == ["make_handler"]
    # And the handler Lambda calls is made over a container of the module's own (which builds
    # nothing before the first invocation)
    assigned = {
        target.id: ast.unparse(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert assigned[function.handler_name] == "make_handler(Container())"


@pytest.mark.parametrize("function", FUNCTIONS.values(), ids=list(FUNCTIONS))
def test_no_function_policy_grants_wildcard_actions(function: FunctionDecl) -> None:
    policies = TEMPLATE.resources[function.logical_id]["Properties"].get("Policies", [])
    for policy in policies if isinstance(policies, list) else [policies]:
        assert policy not in ("AmazonS3FullAccess", "AdministratorAccess")
        if isinstance(policy, dict):
            assert "S3CrudPolicy" not in policy and "S3FullAccessPolicy" not in policy
            for statement in policy.get("Statement", []):
                actions = statement["Action"]
                for action in actions if isinstance(actions, list) else [actions]:
                    assert "*" not in action, (function.logical_id, action)


def test_cfn_lint_passes() -> None:
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    result = subprocess.run(
        [str(cfn_lint), "template.yaml"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_function_uses_a_sam_sqs_event() -> None:
    # SAM's SQS event attaches the managed AWSLambdaSQSQueueExecutionRole: receive and delete on
    # every queue of the account. Queues reach functions through explicit mappings instead.
    for function in FUNCTIONS.values():
        sam_events = [name for name, e in function.events.items() if e.get("Type") == "SQS"]
        assert not sam_events, (function.logical_id, sam_events)


@pytest.mark.parametrize("queue", sorted(CONSUMERS))
def test_each_queue_consumer_may_poll_only_its_own_queue(queue: str) -> None:
    for function in CONSUMERS[queue]:
        policies = TEMPLATE.resources[function.logical_id]["Properties"]["Policies"]
        pollers = [p["SQSPollerPolicy"] for p in policies if "SQSPollerPolicy" in p]
        assert pollers == [{"QueueName": {"Fn::GetAtt": [queue, "QueueName"]}}], pollers


def test_every_function_is_traced() -> None:
    globals_ = TEMPLATE.raw["Globals"]["Function"]
    assert globals_["Tracing"] == "Active"
    for logical_id in FUNCTIONS:
        assert TEMPLATE.resources[logical_id]["Properties"].get("Tracing", "Active") == "Active"


def test_functions_join_a_vpc_only_when_subnets_are_given() -> None:
    # For a meta store only a VPC reaches (RDS): optional, and off by default.
    parameters = TEMPLATE.raw["Parameters"]
    for name in ("FunctionSubnetIds", "FunctionSecurityGroupIds"):
        assert parameters[name]["Type"] == "CommaDelimitedList"
        assert parameters[name]["Default"] == ""
    condition = TEMPLATE.raw["Conditions"]["HasFunctionNetwork"]
    assert condition == {
        "Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", {"Ref": "FunctionSubnetIds"}]}, ""]}]
    }
    vpc = TEMPLATE.raw["Globals"]["Function"]["VpcConfig"]
    assert vpc == {
        "Fn::If": [
            "HasFunctionNetwork",
            {
                "SubnetIds": {"Ref": "FunctionSubnetIds"},
                "SecurityGroupIds": {"Ref": "FunctionSecurityGroupIds"},
            },
            {"Ref": "AWS::NoValue"},
        ]
    }
    for logical_id in FUNCTIONS:  # none overrides it
        assert "VpcConfig" not in TEMPLATE.resources[logical_id]["Properties"], logical_id


def test_every_alarm_notifies_the_alarm_topic_when_one_is_given() -> None:
    alarms = TEMPLATE.of_type("AWS::CloudWatch::Alarm")
    assert len(alarms) >= 5  # two dead-letter queues, the janitor (two), compaction events
    expected = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
    for logical_id, props in alarms.items():
        assert props.get("AlarmActions") == expected, logical_id
    assert TEMPLATE.raw["Parameters"]["AlarmTopicArn"]["Default"] == ""


# What AWSLambdaVPCAccessExecutionRole lets a role change (it also describes, which is harmless).
NETWORK_INTERFACE_WRITES = {
    "ec2:CreateNetworkInterface",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
}


def _function_roles() -> dict[str, Mapping[str, Any]]:
    expanded = sam_expanded()["Resources"]
    roles = {
        logical_id: expanded[f"{logical_id}Role"]["Properties"]
        for logical_id in FUNCTIONS
        if f"{logical_id}Role" in expanded
    }
    assert set(roles) == set(FUNCTIONS)  # SAM writes one role per function
    return roles


def test_sam_attaches_no_account_wide_queue_policy_to_any_role() -> None:
    for logical_id, role in _function_roles().items():
        managed = " ".join(str(arn) for arn in role.get("ManagedPolicyArns", []))
        assert "AWSLambdaSQSQueueExecutionRole" not in managed, logical_id


def test_outside_a_vpc_every_role_is_bounded_to_no_network_interfaces() -> None:
    boundary = {
        "Fn::If": [
            "HasFunctionNetwork",
            {"Ref": "AWS::NoValue"},
            {"Ref": "NoNetworkInterfacesBoundary"},
        ]
    }
    for logical_id, role in _function_roles().items():
        managed = " ".join(str(arn) for arn in role.get("ManagedPolicyArns", []))
        # SAM attaches the VPC policy whatever the !If says; the boundary takes it back.
        if "AWSLambdaVPCAccessExecutionRole" in managed:
            assert role.get("PermissionsBoundary") == boundary, logical_id
    policy = TEMPLATE.resources["NoNetworkInterfacesBoundary"]
    assert policy["Condition"] == "NoFunctionNetwork"
    assert TEMPLATE.raw["Conditions"]["NoFunctionNetwork"] == {
        "Fn::Equals": [{"Fn::Join": ["", {"Ref": "FunctionSubnetIds"}]}, ""]
    }
    denied = set()
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        if statement["Effect"] == "Deny":
            denied |= _actions(statement)
    assert denied >= NETWORK_INTERFACE_WRITES


def test_a_network_needs_both_subnets_and_security_groups() -> None:
    rules = TEMPLATE.raw["Rules"]
    for prefix in ("Function", "Emr"):
        rule = rules[f"{prefix}NetworkIsComplete"]
        assert rule["RuleCondition"] == {
            "Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", {"Ref": f"{prefix}SubnetIds"}]}, ""]}]
        }
        (assertion,) = rule["Assertions"]
        assert assertion["Assert"] == {
            "Fn::Not": [
                {"Fn::Equals": [{"Fn::Join": ["", {"Ref": f"{prefix}SecurityGroupIds"}]}, ""]}
            ]
        }


def test_both_dead_letter_queues_are_outputs() -> None:
    outputs = {
        TEMPLATE.logical_id_of(o["Value"])
        for o in TEMPLATE.raw["Outputs"].values()
        if isinstance(o["Value"], Mapping) and "Ref" in o["Value"]
    }
    dead_letter_queues = {q.dead_letter_target for q in QUEUES.values() if q.dead_letter_target}
    assert dead_letter_queues and dead_letter_queues <= outputs


def test_only_the_query_function_may_assume_the_tenant_read_role_which_reads_only_data() -> None:
    role = TEMPLATE.resources["TenantReadRole"]
    assert role["Type"] == "AWS::IAM::Role"
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Effect"] == "Allow" and trust["Action"] == "sts:AssumeRole"
    assert trust["Principal"] == {"AWS": {"Fn::GetAtt": ["QueryFunctionRole", "Arn"]}}
    # SAM names the function's role so; the trust would otherwise name nothing.
    assert sam_expanded()["Resources"]["QueryFunctionRole"]["Type"] == "AWS::IAM::Role"
    # The role can at most read warehouse objects (each tenant's session narrows it further),
    # and it is bounded like the functions' roles.
    (statement,) = TEMPLATE.statements("TenantReadRole")
    assert _actions(statement) == {"s3:GetObject"}
    assert _resources(statement) == [{"Fn::Sub": "${DataBucket.Arn}/${WarehousePrefix}/*"}]
    assert role["Properties"]["PermissionsBoundary"] == {
        "Fn::If": [
            "HasFunctionNetwork",
            {"Ref": "AWS::NoValue"},
            {"Ref": "NoNetworkInterfacesBoundary"},
        ]
    }
    # Exactly one grant of sts:AssumeRole in the stack: to the query function, on this role.
    assert _granting("sts:") == {}  # no function or role declares it inline
    policies = TEMPLATE.of_type("AWS::IAM::Policy")
    granting = {
        logical_id: props
        for logical_id, props in policies.items()
        if any(
            a.startswith("sts:") for s in props["PolicyDocument"]["Statement"] for a in _actions(s)
        )
    }
    assert set(granting) == {"QueryTenantReadPolicy"}
    props = granting["QueryTenantReadPolicy"]
    assert props["Roles"] == [{"Ref": "QueryFunctionRole"}]
    (grant,) = props["PolicyDocument"]["Statement"]
    assert _actions(grant) == {"sts:AssumeRole"}
    assert _resources(grant) == [{"Fn::GetAtt": ["TenantReadRole", "Arn"]}]
    environment = FUNCTIONS["QueryFunction"].environment
    assert TEMPLATE.logical_id_of(environment["ICEFLOE_TENANT_READ_ROLE_ARN"]) == "TenantReadRole"


def test_the_iceberg_glue_option_scopes_its_policy_to_its_database() -> None:
    # Both exist only when the parameter names a database
    for logical_id in ("IcebergDatabase", "IcebergPublisherPolicy"):
        assert TEMPLATE.resources[logical_id]["Condition"] == "HasIcebergGlueDatabase"
    assert TEMPLATE.raw["Conditions"]["HasIcebergGlueDatabase"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "IcebergGlueDatabase"}, ""]}]
    }
    statements = TEMPLATE.resources["IcebergPublisherPolicy"]["Properties"]["PolicyDocument"][
        "Statement"
    ]
    for statement in statements:
        assert all("*" not in a for a in _actions(statement)), statement
        for resource in _resources(statement):
            if "s3:ListBucket" in _actions(statement):
                # ... listed only under the metadata prefix (a HEAD of a missing key is then
                # a 404, which the metadata writer asks before it puts)
                assert resource == {"Fn::GetAtt": ["DataBucket", "Arn"]}
                assert statement["Condition"] == {
                    "StringLike": {"s3:prefix": {"Fn::Sub": "${WarehousePrefix}/iceberg/*"}}
                }
                continue
            text = resource["Fn::Sub"]
            if _actions(statement) & {"glue:CreateTable", "glue:UpdateTable"}:
                # The catalog, the database, and its tables: never another database
                assert text.endswith((":catalog", ":database/${IcebergGlueDatabase}",
                                      ":table/${IcebergGlueDatabase}/*")), text  # fmt: skip
            elif "s3:PutObject" in _actions(statement):
                assert text == "${DataBucket.Arn}/${WarehousePrefix}/iceberg/*"
            else:
                assert _actions(statement) == {"s3:GetObject"}
                assert text == "${DataBucket.Arn}/${WarehousePrefix}/*/data/*"
    # No function or role declares Glue actions inline: the publisher has them from this policy
    assert not _granting("glue:")


PUBLISHER = "PublisherFunction"


def test_the_publisher_exists_only_with_the_glue_database_and_runs_on_its_schedule() -> None:
    # The function, its layers and alarms exist only when the parameter names a database
    conditional = [PUBLISHER, "PublisherCoreLayer", "IcebergLayer", "PublisherErrorsAlarm",
                   "PublisherTablesFailedAlarm"]  # fmt: skip
    for logical_id in conditional:
        assert TEMPLATE.resources[logical_id]["Condition"] == "HasIcebergGlueDatabase", logical_id
    assert TEMPLATE.raw["Outputs"]["PublisherFunctionName"]["Condition"] == (
        "HasIcebergGlueDatabase"
    )
    assert TEMPLATE.parameter_default("IcebergGlueDatabase") == ""
    # Every 5 minutes by default (a parameter), invoked with {} (every opted-in table), a
    # failed pass not retried: the next one publishes whatever is still due
    (schedule,) = FUNCTIONS[PUBLISHER].schedules
    assert schedule.type == "ScheduleV2"
    assert schedule.properties["ScheduleExpression"] == {"Ref": "PublisherScheduleExpression"}
    assert schedule.expression == "rate(5 minutes)"
    assert schedule.input == "{}"
    assert schedule.properties["RetryPolicy"] == {"MaximumRetryAttempts": 0}
    # One pass at a time; a tick that finds one running is dropped within a minute
    props = TEMPLATE.resources[PUBLISHER]["Properties"]
    assert props["ReservedConcurrentExecutions"] == 1
    assert props["EventInvokeConfig"] == {"MaximumEventAgeInSeconds": 60, "MaximumRetryAttempts": 0}
    # Its catalog is the stack's Glue database, its metadata under the warehouse's iceberg/
    environment = FUNCTIONS[PUBLISHER].environment
    assert environment["ICEFLOE_ICEBERG_CATALOG"] == "glue"
    assert environment["ICEFLOE_ICEBERG_NAMESPACE"] == {"Ref": "IcebergGlueDatabase"}
    assert environment["ICEFLOE_ICEBERG_METADATA_LOCATION"] == {
        "Fn::Sub": "s3://${DataBucket}/${WarehousePrefix}/iceberg"
    }
    database = TEMPLATE.resources["IcebergDatabase"]["Properties"]["DatabaseInput"]
    assert database["Name"] == {"Ref": "IcebergGlueDatabase"}


def test_the_publishers_layers_are_its_core_and_iceberg_built_by_the_layer_script() -> None:
    props = TEMPLATE.resources[PUBLISHER]["Properties"]
    assert props["Layers"] == [{"Ref": "PublisherCoreLayer"}, {"Ref": "IcebergLayer"}]
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    for layer, kind in (("PublisherCoreLayer", "publisher-core"), ("IcebergLayer", "iceberg")):
        resource = TEMPLATE.resources[layer]
        assert resource["Metadata"]["BuildMethod"] == "makefile"
        assert resource["Properties"]["CompatibleRuntimes"] == ["python3.12"]
        target = makefile.split(f"build-{layer}:\n", 1)[1].split("\n\n", 1)[0]
        assert f"build_layer.py --layer {kind} " in target, target
    # Every other function keeps the core layer of the Globals
    for logical_id in FUNCTIONS:
        if logical_id != PUBLISHER:
            assert "Layers" not in TEMPLATE.resources[logical_id]["Properties"], logical_id
    assert TEMPLATE.raw["Globals"]["Function"]["Layers"] == [{"Ref": "CoreLayer"}]


def test_the_publisher_may_use_glue_only_on_its_database_and_write_only_iceberg_metadata() -> None:
    policies = TEMPLATE.resources[PUBLISHER]["Properties"]["Policies"]
    # The meta store's secret, and IcebergPublisherPolicy (checked above): nothing else
    assert policies == [
        {"AWSSecretsManagerGetSecretValuePolicy": {"SecretArn": {"Ref": "DatabaseSecretArn"}}},
        {"Ref": "IcebergPublisherPolicy"},
    ]
    statements = TEMPLATE.resources["IcebergPublisherPolicy"]["Properties"]["PolicyDocument"][
        "Statement"
    ]
    glue = [s for s in statements if any(a.startswith("glue:") for a in _actions(s))]
    assert glue and all(a.startswith("glue:") for s in glue for a in _actions(s))
    for statement in glue:
        arns = [r["Fn::Sub"] for r in _resources(statement)]
        prefix = "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:"
        assert sorted(arns) == sorted(
            [f"{prefix}catalog", f"{prefix}database/${{IcebergGlueDatabase}}",
             f"{prefix}table/${{IcebergGlueDatabase}}/*"]
        )  # fmt: skip
    writes = {"s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"}
    written = [s for s in statements if _actions(s) & writes]
    assert [_actions(s) & writes for s in written] == [{"s3:PutObject"}]
    assert _resources(written[0]) == [{"Fn::Sub": "${DataBucket.Arn}/${WarehousePrefix}/iceberg/*"}]
    # SAM attaches the policy to the publisher's role, and nothing more of S3 or Glue
    role = sam_expanded()["Resources"][f"{PUBLISHER}Role"]["Properties"]
    assert {"Ref": "IcebergPublisherPolicy"} in role["ManagedPolicyArns"]
    inline = [
        s for policy in role.get("Policies", []) for s in policy["PolicyDocument"]["Statement"]
    ]
    inline_actions = {a for s in inline for a in _actions(s)}
    assert not {a for a in inline_actions if a.startswith(("s3:", "glue:"))}, inline_actions


def test_the_publisher_failing_raises_alarms_like_the_janitors() -> None:
    alarms = TEMPLATE.of_type("AWS::CloudWatch::Alarm")
    errors, failed = alarms["PublisherErrorsAlarm"], alarms["PublisherTablesFailedAlarm"]
    assert errors["MetricName"] == "Errors" and errors["Namespace"] == "AWS/Lambda"
    assert errors["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": PUBLISHER}}]
    # A table failing in each of three hours (the janitor's rule), by the function's service
    janitor = alarms["JanitorTablesFailedAlarm"]
    assert failed["MetricName"] == janitor["MetricName"] == "TablesFailed"
    service = FUNCTIONS[PUBLISHER].environment["POWERTOOLS_SERVICE_NAME"]
    assert failed["Dimensions"] == [{"Name": "service", "Value": service}]
    for key in ("Period", "EvaluationPeriods", "DatapointsToAlarm", "Statistic"):
        assert failed[key] == janitor[key], key


def _dashboard_widgets() -> list[dict[str, Any]]:
    (props,) = TEMPLATE.of_type("AWS::CloudWatch::Dashboard").values()
    body = props["DashboardBody"]["Fn::Sub"]
    # ${Name} and ${Name.Attr} are the stack's: kept as text, so the JSON parses
    return list(json.loads(body)["widgets"])


def _dashboard_metrics() -> list[list[Any]]:
    return [
        metric
        for widget in _dashboard_widgets()
        for metric in widget["properties"]["metrics"]
        if isinstance(metric[0], str)  # not a math expression
    ]


def _emitted_metrics(service: str) -> set[str]:
    """The metric names the function of ``service`` emits: the first argument of each
    ``telemetry.count``/``count_bytes`` call in its module, and the names of a loop over
    (name, field) pairs that it counts."""
    module = service.removeprefix("icefloe-").replace("-", "_")
    source = REPO_ROOT / "shared" / "icefloe" / "aws" / "functions" / f"{module}.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("count", "count_bytes")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(str(node.args[0].value))
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
            names |= {
                str(pair.elts[0].value)
                for pair in node.iter.elts
                if isinstance(pair, ast.Tuple) and isinstance(pair.elts[0], ast.Constant)
            }
    return names


def test_the_dashboard_shows_only_metrics_the_functions_emit() -> None:
    icefloe_metrics = [m for m in _dashboard_metrics() if m[0] == "icefloe"]
    assert len(icefloe_metrics) >= 10
    for _, name, dimension, service, *_ in icefloe_metrics:
        assert dimension == "service"
        assert name in _emitted_metrics(service), f"{service} emits no metric {name}"


def test_the_dashboards_aws_metrics_name_the_stacks_functions_and_queues() -> None:
    for namespace, _, dimension, value, *_ in _dashboard_metrics():
        if namespace == "icefloe":
            continue
        logical_id = re.fullmatch(r"\$\{(\w+?)(\.QueueName)?\}", value)
        assert logical_id, value
        kind = {"AWS/Lambda": FUNCTIONS, "AWS/SQS": QUEUES}[namespace]
        assert (dimension, logical_id.group(1) in kind) in (
            ("FunctionName", True),
            ("QueueName", True),
        ), value


def test_the_dashboard_covers_ingest_merges_queries_dead_letters_janitor_and_cost() -> None:
    metrics = {(m[0], m[1]) for m in _dashboard_metrics()}
    assert {
        ("icefloe", "RowsInserted"),
        ("AWS/SQS", "ApproximateAgeOfOldestMessage"),
        ("icefloe", "LiveFiles"),
        ("icefloe", "LivePartitions"),
        ("icefloe", "QueryBytesScanned"),
        ("icefloe", "FilesDeleted"),
        ("AWS/Lambda", "Invocations"),
        ("AWS/SQS", "NumberOfMessagesSent"),
    } <= metrics
    queues = {m[3] for m in _dashboard_metrics() if m[1] == "ApproximateNumberOfMessagesVisible"}
    assert {"${InsertDeadLetterQueue.QueueName}", "${MergeDeadLetterQueue.QueueName}"} <= queues
    latency = {m[4]["stat"] for m in _dashboard_metrics() if m[1] == "Duration" and "Query" in m[3]}
    assert {"p50", "p99"} <= latency


def test_the_dashboards_gb_seconds_use_each_functions_memory() -> None:
    for widget in _dashboard_widgets():
        metrics = widget["properties"]["metrics"]
        durations = {m[4]["id"]: m[3] for m in metrics if isinstance(m[0], str) and "id" in m[4]}
        for (math,) in (m for m in metrics if isinstance(m[0], dict)):
            found = re.fullmatch(r"(d\d+) / 1000 \* (\d+) / 1024", math["expression"])
            if found is None:
                continue
            function = durations[found.group(1)].strip("${}")
            assert int(found.group(2)) == FUNCTIONS[function].memory_size, function
    assert any("GB-s" in w["properties"]["title"] for w in _dashboard_widgets())
