"""Schema evolution: add, drop, rename and widen columns, and fields inside struct columns.

:func:`evolve` applies changes to a spec and returns the next version. Each change keeps the
columns' ids (see :mod:`icefloe.spec.layout`): an added column takes a new id, so files written
before read it as NULL; a renamed column keeps its id, so its data stays; a dropped column's
id is retired, so adding a column of the same name later starts empty.

What a change may not touch, because files, paths or filters already depend on it: partition
source columns, the row-group key and the tenant column cannot be dropped, renamed or widened;
the overflow column cannot be dropped or renamed; the keys of a replace or aggregate merge
cannot be dropped (a rename follows them). A custom merge query names columns in its own SQL,
so the caller checks it again against the new spec; so it does a generated column's
expression, whose names must read the columns and fields they read before, by id and type
(:func:`source_change`): its stored values were computed from them. A dotted name changes a
field inside a struct column, by field id (:mod:`icefloe.spec.field_changes`).

How files of any version are read with the current columns: :mod:`icefloe.spec.reading`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from icefloe.errors import SpecError
from icefloe.spec import field_changes, types
from icefloe.spec.field_ids import NestedField, fresh_nested_ids
from icefloe.spec.layout import FileLayout
from icefloe.spec.merge import AggregateMode, MergeMode, ReplaceMode
from icefloe.spec.schema import Column, check_unique_columns
from icefloe.spec.table_spec import TableSpec
from icefloe.spec.type_tree import Struct, format_type

_INTEGER_WIDTHS = {"TINYINT": 1, "SMALLINT": 2, "INTEGER": 3, "BIGINT": 4, "HUGEINT": 5}
_UNSIGNED_WIDTHS = {"UTINYINT": 1, "USMALLINT": 2, "UINTEGER": 3, "UBIGINT": 4}


@dataclass(frozen=True, slots=True)
class AddColumn:
    """A new nullable column; rows written before read it as NULL."""

    column: Column


@dataclass(frozen=True, slots=True)
class DropColumn:
    name: str


@dataclass(frozen=True, slots=True)
class RenameColumn:
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class WidenColumn:
    """A wider type of the same kind: a wider integer, FLOAT to DOUBLE, a DECIMAL of larger
    precision and the same scale."""

    name: str
    type: str


@dataclass(frozen=True, slots=True)
class AddField:
    """A new field at the end of a struct (``path`` from the column down:
    ``context.page.title``); rows written before read it as NULL. Drop, rename and widen take
    such paths in place of a column name too (a rename's new name stays in the same struct)."""

    path: str
    type: str


SchemaChange = AddColumn | AddField | DropColumn | RenameColumn | WidenColumn


def describe(change: SchemaChange) -> str:
    """The change in the CLI's words: ``add column c INTEGER``."""
    if isinstance(change, AddColumn):
        return f"add column {change.column.to_text()}"
    if isinstance(change, AddField):
        return f"add field {change.path} {types.normalize_type(change.type)}"
    target = change.old if isinstance(change, RenameColumn) else change.name
    what = "field" if "." in target else "column"  # a dotted name is a field inside a struct
    if isinstance(change, DropColumn):
        return f"drop {what} {change.name}"
    if isinstance(change, RenameColumn):
        return f"rename {what} {change.old} to {change.new}"
    return f"widen {what} {change.name} to {types.normalize_type(change.type)}"


def evolve(spec: TableSpec, changes: Sequence[SchemaChange]) -> TableSpec:
    """The next version of ``spec``: ``changes`` applied in order. SpecError names the first
    change that cannot be made, and why."""
    if not changes:
        raise SpecError("alter: no change given")
    columns = list(spec.columns)
    ids = list(spec.column_ids)
    nested_ids = list(spec.nested_ids)
    last_id = spec.last_column_id
    sort_by = list(spec.sort_by)
    merge = spec.merge
    for change in changes:
        where = f"alter {spec.name!r}: cannot {describe(change)}"
        target = change.path if isinstance(change, AddField) else _target(change)
        if "." in target:
            index = _index(columns, target.split(".")[0])
            if index is None:
                raise SpecError(f"{where}: no such column")
            _check_field_allowed(spec, target, change, where)
            try:
                columns[index], nested_ids[index], last_id = _change_field(
                    columns[index], nested_ids[index], target, change, last_id
                )
            except SpecError as e:
                raise SpecError(f"{where}: {e}") from e
            sort_by = _keys_after(sort_by, target, change)
            continue
        if isinstance(change, AddField):
            raise SpecError(f"{where}: name a field inside a struct (column.field)")
        if isinstance(change, AddColumn):
            if not change.column.nullable:
                raise SpecError(f"{where}: an added column must be nullable (old rows hold NULL)")
            columns.append(change.column)
            last_id += 1
            ids.append(last_id)
            (inside,) = fresh_nested_ids(
                [types.type_tree(change.column.type)], first_id=last_id + 1
            )
            nested_ids.append(inside)
            last_id += len(inside)
            merge = _merge_added(merge, change.column.name)
            _check_unique(columns, where)
            continue
        index = _index(columns, change.old if isinstance(change, RenameColumn) else change.name)
        if index is None:
            raise SpecError(f"{where}: no such column")
        name = columns[index].name
        _check_allowed(spec, name, change, where)
        if isinstance(change, DropColumn):
            if len(columns) == 1:
                raise SpecError(f"{where}: it is the table's only column")
            merge = _merge_dropped(merge, name, where)
            del columns[index]
            del ids[index]
            del nested_ids[index]
            sort_by = [k for k in sort_by if k.split(".")[0] != name]
        elif isinstance(change, RenameColumn):
            columns[index] = replace(columns[index], name=change.new)
            _check_unique(columns, where)
            merge = _merge_renamed(merge, name, change.new)
            sort_by = [_renamed_key(k, name, change.new) for k in sort_by]
        else:
            wider = types.normalize_type(change.type)
            if not is_widening(columns[index].type, wider):
                raise SpecError(
                    f"{where}: {columns[index].type} to {wider} is not a widening (allowed: a"
                    " wider integer of the same signedness, FLOAT to DOUBLE, a DECIMAL of"
                    " larger precision and the same scale)"
                )
            columns[index] = replace(columns[index], type=wider)
    return replace(
        spec,
        columns=tuple(columns),
        column_ids=tuple(ids),
        nested_ids=tuple(nested_ids),
        last_column_id=last_id,
        sort_by=tuple(sort_by),
        merge=merge,
        version=spec.version + 1,
        past_layouts=(*spec.past_layouts, spec.layout),
    )


def is_widening(old: str, new: str) -> bool:
    """True when every value of type ``old`` is a value of type ``new`` and ``new`` differs."""
    old, new = types.normalize_type(old), types.normalize_type(new)
    for widths in (_INTEGER_WIDTHS, _UNSIGNED_WIDTHS):
        if old in widths and new in widths:
            return widths[new] > widths[old]
    if (old, new) == ("FLOAT", "DOUBLE"):
        return True
    before, after = types.decimal_precision_scale(old), types.decimal_precision_scale(new)
    if before is not None and after is not None:
        return after[1] == before[1] and after[0] > before[0]
    return False


def _index(columns: Sequence[Column], name: str) -> int | None:
    return next((i for i, c in enumerate(columns) if c.name == name), None)


def _check_unique(columns: Sequence[Column], where: str) -> None:
    try:
        check_unique_columns(columns)
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from e


def _check_allowed(spec: TableSpec, name: str, change: SchemaChange, where: str) -> None:
    roles = []
    if name in spec.partition_source_columns:
        roles.append("a partition source (its values name the table's partitions)")
    if spec.row_group_by is not None and spec.row_group_by.split(".")[0] == name:
        roles.append("the row-group key (its files' membership filters hash its values)")
    if name == spec.tenant_column:
        roles.append("the tenant column")
    if roles:
        raise SpecError(f"{where}: it is {' and '.join(roles)}")
    if name == spec.overflow_column and not isinstance(change, WidenColumn):
        raise SpecError(f"{where}: it is the overflow column of extra fields")


def _target(change: DropColumn | RenameColumn | WidenColumn | AddColumn) -> str:
    if isinstance(change, AddColumn):
        return change.column.name
    return change.old if isinstance(change, RenameColumn) else change.name


def _change_field(
    column: Column, ids: tuple[int, ...], target: str, change: SchemaChange, last_id: int
) -> tuple[Column, tuple[int, ...], int]:
    """A change of the field at ``target`` (``column.field...``), and the last id given."""
    path = tuple(target.split(".")[1:])
    if isinstance(change, AddField):
        edit, taken = field_changes.add(
            path[-1], types.normalize_type(change.type), first_id=last_id + 1
        )
        column, ids = field_changes.change_field(column, ids, path, edit)
        return column, ids, last_id + taken
    if isinstance(change, DropColumn):
        column, ids = field_changes.change_field(column, ids, path, field_changes.drop)
    elif isinstance(change, RenameColumn):
        parent, dot, new = change.new.rpartition(".")
        if dot and parent != target.rpartition(".")[0]:
            raise SpecError(f"a field is renamed within its struct ({target.rpartition('.')[0]})")
        column, ids = field_changes.change_field(column, ids, path, field_changes.rename(new))
    elif isinstance(change, WidenColumn):
        wider = types.normalize_type(change.type)
        column, ids = field_changes.change_field(
            column, ids, path, field_changes.widen(wider, is_widening)
        )
    else:
        raise SpecError("a column is added with its own name, not a path")
    return column, ids, last_id


def _check_field_allowed(spec: TableSpec, target: str, change: SchemaChange, where: str) -> None:
    """A field holding the row-group key (or being it) keeps its path and type: files'
    membership filters and row groups depend on it. Adding a field changes no key."""
    key = spec.row_group_by
    if isinstance(change, AddField) or key is None:
        return
    if key == target or key.startswith(target + "."):
        raise SpecError(f"{where}: it is or holds the row-group key {key!r}")


def _keys_after(sort_by: list[str], target: str, change: SchemaChange) -> list[str]:
    """Sort keys after a field change: a dropped field's keys go, a renamed one's follow."""
    inside = [k for k in sort_by if k == target or k.startswith(target + ".")]
    if isinstance(change, DropColumn):
        return [k for k in sort_by if k not in inside]
    if isinstance(change, RenameColumn):
        renamed = target.rpartition(".")[0] + "." + change.new.rpartition(".")[2]
        return [renamed + k[len(target) :] if k in inside else k for k in sort_by]
    return sort_by


def _renamed_key(key: str, old: str, new: str) -> str:
    """A sort key after column ``old`` is renamed ``new`` (a struct leaf's path follows)."""
    column, dot, rest = key.partition(".")
    return new + dot + rest if column == old else key


def _merge_added(merge: MergeMode, name: str) -> MergeMode:
    """An aggregate merge keeps one value of a new column per key (``any``)."""
    if isinstance(merge, AggregateMode):
        return replace(merge, aggregates=(*merge.aggregates, (name, "any")))
    return merge


def _merge_dropped(merge: MergeMode, name: str, where: str) -> MergeMode:
    if isinstance(merge, ReplaceMode) and (name in merge.key or name == merge.version):
        raise SpecError(f"{where}: the replace merge keys on it ({merge.to_text()})")
    if isinstance(merge, AggregateMode):
        if name in merge.group_by:
            raise SpecError(f"{where}: the aggregate merge groups by it ({merge.to_text()})")
        return replace(merge, aggregates=tuple(a for a in merge.aggregates if a[0] != name))
    return merge


def _merge_renamed(merge: MergeMode, old: str, new: str) -> MergeMode:
    def renamed(key: str) -> str:
        return new if key == old else key

    if isinstance(merge, ReplaceMode):
        version = None if merge.version is None else renamed(merge.version)
        return replace(merge, key=tuple(map(renamed, merge.key)), version=version)
    if isinstance(merge, AggregateMode):
        return replace(
            merge,
            group_by=tuple(map(renamed, merge.group_by)),
            aggregates=tuple((renamed(c), fn) for c, fn in merge.aggregates),
        )
    return merge


# -- what a name reads across versions -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Step:
    """A column, or a struct field inside one, that a name reaches in a layout."""

    name: str  # as the layout spells it
    id: int
    type: str  # canonical text
    inside: tuple[int, ...]  # the ids inside its type, in walk order


def source_change(before: FileLayout, after: FileLayout, path: Sequence[str]) -> str | None:
    """How what ``path`` (a column's name, then struct field names: ``ctx.page.url``) reads in
    ``before`` is not what it reads in ``after``, in words (``column 'a' it reads would be
    dropped``); None when it is the same: the same column id under the column's name, the same
    field id under each field's name, and the same type (and ids inside it) at its end. Names
    match ignoring case, as DuckDB binds them; a name that reaches nothing in either is no
    change. What a generated column's stored values were computed from must stay what its
    expression reads."""
    old, new = _reach(before, path), _reach(after, path)
    if _same(old, new):
        return None
    for i in range(max(len(old), len(new))):
        kind = "column" if i == 0 else "field"
        if i >= len(old):  # the name reaches further than it did: something was added there
            label = ".".join(s.name for s in new[: i + 1])
            return f"{kind} {label!r} would be added under a name it reads"
        label = ".".join(s.name for s in old[: i + 1])
        if i < len(new) and new[i].id == old[i].id:
            continue
        moved = _path_of(after, old[i].id)
        text = f"{kind} {label!r} it reads would be " + (
            "dropped" if moved is None else f"renamed {moved!r}"
        )
        if i < len(new):
            was = _path_of(before, new[i].id)
            text += f", and {label!r} would name another {kind}: " + (
                f"the one that is {was!r} now" if was is not None else "one this change adds"
            )
        return text
    # the same ids all the way: the end of the path changes type (or the ids inside it)
    kind = "column" if len(old) == 1 else "field"
    label = ".".join(s.name for s in old)
    first, last = old[-1].type, new[-1].type
    if first == last:
        return f"{kind} {label!r} it reads would have a field inside it dropped and added again"
    verb = "widened" if is_widening(first, last) else "changed"
    return f"{kind} {label!r} it reads would be {verb} from {first} to {last}"


def _same(old: Sequence[_Step], new: Sequence[_Step]) -> bool:
    """The same ids along the path, and the same type at its end (steps before the end may
    change inside, elsewhere than the path)."""
    if [s.id for s in old] != [s.id for s in new]:
        return False
    return not old or (old[-1].type, old[-1].inside) == (new[-1].type, new[-1].inside)


def _reach(layout: FileLayout, path: Sequence[str]) -> tuple[_Step, ...]:
    """The column, then each struct field, that ``path``'s names reach in ``layout``, as far as
    they reach (a name past a type that is not a struct reaches nothing more)."""
    if not path:
        return ()
    column = next((c for c in layout.columns if c.name.lower() == path[0].lower()), None)
    if column is None:
        return ()
    steps = [_Step(column.name, column.id, column.type, column.nested_ids)]
    node, fields = types.type_tree(column.type), column.fields
    for name in path[1:]:
        if not isinstance(node, Struct):
            break
        field = next((f for f in fields if f.name.lower() == name.lower()), None)
        if field is None:
            break
        steps.append(_Step(field.name, field.id, format_type(field.type), _ids(field.fields)))
        node, fields = field.type, field.fields
    return tuple(steps)


def _ids(fields: Sequence[NestedField]) -> tuple[int, ...]:
    """The ids of ``fields`` and of those inside them, in walk order."""
    return tuple(i for f in fields for i in (f.id, *_ids(f.fields)))


def _path_of(layout: FileLayout, wanted: int) -> str | None:
    """The dotted path of the column or struct field with id ``wanted`` in ``layout``."""
    for column in layout.columns:
        if column.id == wanted:
            return column.name
        found = _field_path(column.fields, wanted)
        if found is not None:
            return ".".join((column.name, *found))
    return None


def _field_path(fields: Sequence[NestedField], wanted: int) -> tuple[str, ...] | None:
    for field in fields:
        if field.id == wanted:
            return (field.name,)
        inside = _field_path(field.fields, wanted)
        if inside is not None:
            return (field.name, *inside)
    return None
