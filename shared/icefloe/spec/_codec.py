"""JSON-safe dict forms of the spec's parts, and strict readers that name the bad field."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict
from typing import cast

from icefloe.errors import SpecError
from icefloe.spec._text import show
from icefloe.spec.merge import (
    AggregateFunction,
    AggregateMode,
    AppendMode,
    CustomMode,
    MergeMode,
    ReplaceMode,
)
from icefloe.spec.partitioning import PartitionField, Transform
from icefloe.spec.policy import Retention, SizeTargets
from icefloe.spec.schema import Column


def mapping(
    value: object, *, where: str, required: Collection[str] = (), optional: Collection[str] = ()
) -> Mapping[str, object]:
    """``value`` as a mapping with exactly the ``required`` keys and some ``optional`` ones."""
    if not isinstance(value, Mapping):
        raise SpecError(f"{where}: expected an object, got {show(value)}")
    keys = set(value)
    missing = sorted(set(required) - keys)
    unknown = sorted(keys - set(required) - set(optional), key=str)
    if missing:
        raise SpecError(f"{where}: missing key {missing[0]!r}")
    if unknown:
        raise SpecError(f"{where}: unknown key {show(unknown[0])}")
    return cast(Mapping[str, object], value)


def string(value: object, *, where: str) -> str:
    """``value`` if it is a str."""
    if not isinstance(value, str):
        raise SpecError(f"{where}: expected a string, got {show(value)}")
    return value


def integer(value: object, *, where: str) -> int:
    """``value`` if it is an integer (not a bool), else SpecError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}: {show(value)} must be an integer")
    return value


def optional_string(value: object, *, where: str) -> str | None:
    """``value`` if it is a str or None."""
    return None if value is None else string(value, where=where)


def items(value: object, *, where: str) -> list[object]:
    """``value`` as a list, if it is a JSON array (list or tuple)."""
    if not isinstance(value, list | tuple):
        raise SpecError(f"{where}: expected a list, got {show(value)}")
    return list(value)


def strings(value: object, *, where: str) -> tuple[str, ...]:
    """``value`` as a tuple of str."""
    return tuple(string(item, where=where) for item in items(value, where=where))


def column_to_dict(column: Column) -> dict[str, object]:
    """``{"name", "type", "nullable"}``, and ``"expression"`` for a generated column."""
    out: dict[str, object] = {"name": column.name, "type": column.type, "nullable": column.nullable}
    if column.expression is not None:
        out["expression"] = column.expression
    return out


def column_from_dict(value: object) -> Column:
    """Inverse of :func:`column_to_dict`."""
    d = mapping(
        value, where="columns", required=("name", "type"), optional=("nullable", "expression")
    )
    nullable = d.get("nullable", True)
    if not isinstance(nullable, bool):
        raise SpecError(f"columns: nullable must be true or false, got {show(nullable)}")
    where = "columns"
    expression = d.get("expression")
    return Column(
        string(d["name"], where=where),
        string(d["type"], where=where),
        nullable,
        None if expression is None else string(expression, where=where),
    )


def field_to_dict(field: PartitionField) -> dict[str, object]:
    """``{"source", "transform", "param", "name"}``."""
    return {
        "source": field.source,
        "transform": field.transform,
        "param": field.param,
        "name": field.name,
    }


def field_from_dict(value: object) -> PartitionField:
    """Inverse of :func:`field_to_dict`."""
    where = "partition_by"
    d = mapping(value, where=where, required=("source", "transform", "name"), optional=("param",))
    param = d.get("param")
    if param is not None and (isinstance(param, bool) or not isinstance(param, int)):
        raise SpecError(f"{where}: param must be an integer or null, got {show(param)}")
    return PartitionField(
        string(d["source"], where=where),
        cast(Transform, string(d["transform"], where=where)),
        param,
        string(d["name"], where=where),
    )


def merge_to_dict(mode: MergeMode) -> dict[str, object]:
    """``{"mode": "append"|"replace"|"aggregate"|"custom", ...}``."""
    if isinstance(mode, ReplaceMode):
        return {"mode": "replace", "key": list(mode.key), "version": mode.version}
    if isinstance(mode, AggregateMode):
        aggregates = [{"column": col, "function": fn} for col, fn in mode.aggregates]
        return {"mode": "aggregate", "group_by": list(mode.group_by), "aggregates": aggregates}
    if isinstance(mode, CustomMode):
        return {"mode": "custom", "sql": mode.sql}
    return {"mode": "append"}


def merge_from_dict(value: object) -> MergeMode:
    """Inverse of :func:`merge_to_dict`."""
    where = "merge"
    kind = mapping(
        value, where=where, optional=("mode", "key", "version", "group_by", "aggregates", "sql")
    ).get("mode")
    if kind == "append":
        mapping(value, where=where, required=("mode",))
        return AppendMode()
    if kind == "replace":
        d = mapping(value, where=where, required=("mode", "key"), optional=("version",))
        key = strings(d["key"], where=where)
        return ReplaceMode(key, optional_string(d.get("version"), where=where))
    if kind == "aggregate":
        d = mapping(value, where=where, required=("mode", "group_by", "aggregates"))
        aggregates = []
        for item in items(d["aggregates"], where=where):
            agg = mapping(item, where=where, required=("column", "function"))
            function = cast(AggregateFunction, string(agg["function"], where=where))
            aggregates.append((string(agg["column"], where=where), function))
        return AggregateMode(strings(d["group_by"], where=where), tuple(aggregates))
    if kind == "custom":
        d = mapping(value, where=where, required=("mode", "sql"))
        return CustomMode(string(d["sql"], where=where))
    raise SpecError(f"{where}: unknown mode {show(kind)}")


def policy_to_dict(policy: SizeTargets | Retention) -> dict[str, object]:
    """All fields of a size or retention policy."""
    return asdict(policy)


def sizes_from_dict(value: object) -> SizeTargets:
    """Inverse of :func:`policy_to_dict` for sizes; missing keys take their defaults."""
    d = mapping(value, where="sizes", optional=SizeTargets.__dataclass_fields__)
    return SizeTargets(**cast(Mapping[str, int], d))


def retention_from_dict(value: object) -> Retention:
    """Inverse of :func:`policy_to_dict` for retention; missing keys take their defaults."""
    d = mapping(value, where="retention", optional=Retention.__dataclass_fields__)
    return Retention(**cast(Mapping[str, int], d))
