"""JSON text checked for nesting and completeness before any parser reads it.

pyarrow's JSON reader (the one-parse NDJSON path, :mod:`icefloe.ingest.json_input`) parses a
nested value recursively, on the stack of the thread that reads it: a record nesting about
20,000 brackets (40 KB of ``[``) overflows an 8 MiB stack, and the process dies (SIGSEGV)
before any check of icefloe's runs. DuckDB's reader is iterative (it refused 10^6 levels
cleanly), but it reads a JSON array that is never closed (``[{...}, {...},``) as the objects
it holds. So the bytes of every JSON input are scanned before pyarrow's parser reads them,
and before any answer of DuckDB's counts (DuckDB may read an NDJSON file's JSON columns while
it is scanned: no nesting harms its reader, and its answer is dropped if the scan refuses):

- NDJSON: no line may nest its record more than ``max_json_depth`` levels (a field's value may
  nest that deep, its line one level more). Each line has at least as many opening brackets
  as levels, strings or not, so a block of lines whose brackets (``{`` written ``[``) hold no
  run of ``limit + 1`` passes in one ``translate`` and one substring search, and the count of
  its line breaks is the lines the one-parse path needs anyway. Only a block with such a run
  is scanned exactly (:func:`skeleton`, :func:`lines_within`), and only a line that fails
  that is tokenized, to name its row and field. A line cut short is the parsers' to refuse:
  they stop where it goes wrong, no deeper than it nests.
- A JSON file (an array of records, or records one after another): scanned exactly as a
  whole, its running depth carried from block to block; an element of an array may nest one
  level more than a line. The file must close every bracket and string it opens, close none
  it did not, and hold no string that runs past its line: a refusal names the file.

The exact scan works on the text's bracket skeleton, as :mod:`~icefloe.ingest.json_depth` does,
with its line breaks kept (a JSON string never holds a raw line break, so every string ends
within its line, and a block of whole lines is scanned on its own), with C-speed ``bytes``
methods:

1. escaped backslashes, then escaped quotes, are dropped; every byte but brackets, quotes and
   line breaks is dropped (``{}`` written ``[]``);
2. strings are dropped: when no string holds a bracket (counted: every quote is then one of an
   adjacent ``""`` pair) the quotes go; otherwise each ``"..."`` within its line is removed,
   and a quote left open takes the rest of its line with it;
3. each pass removes every ``[]`` (the leaves); a line break is never removed, so pairs never
   span lines. When no ``[`` is left after ``n`` passes, no line nests more than ``n`` levels.
   Brackets left after a few passes are measured exactly: each line's running depth as a
   cumulative sum in Arrow (as a JSON file's always is).

The skeleton is exact for text whose backslashes are all in strings, as JSON's are; a
backslash outside a string is where every parser stops.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from icefloe.errors import BatchRejectedError, RowProblem

# The most levels any JSON input may nest, whatever the limits say: pyarrow's recursive parse
# of 1,000 levels uses about half a MiB of stack, a sixteenth of a thread's usual 8 MiB.
MAX_JSON_DEPTH_CAP = 1000
# A JSON file is read in blocks of whole lines of about this size (a longer line grows one).
BLOCK_BYTES = 8 << 20
_SQUARE = bytes.maketrans(b"{}", b"[]")
_ALL_BUT_MARKS = bytes(b for b in range(256) if b not in b'[]{}"\n')
_COMPLETE_STRING = re.compile(rb'"[^"\n]*"')
_OPEN_STRING = re.compile(rb'"[^\n]*')
# A skeleton byte as a step of depth (read as int8): [ is +1, ] is -1, a line break 0.
_STEPS = bytes.maketrans(b"[]\n", b"\x01\xff\x00")
# Passes of [] removal tried before a line's depth is measured exactly.
_PASSES = 4
# Skeleton bytes measured per cumulative sum (64 MiB of int32).
_PIECE = 1 << 24


def skeleton(text: bytes) -> tuple[bytes, bool]:
    """The brackets of JSON text outside its strings, all written ``[`` and ``]``, with its line
    breaks; and whether a string is left open at the end of a line (which valid JSON never
    does). Strings are taken to end within their line."""
    if b"\\" in text:
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = text.translate(_SQUARE, _ALL_BUT_MARKS)
    quotes = marks.count(b'"')
    if not quotes:
        return marks, False
    if quotes == 2 * marks.count(b'""'):
        # Every quote is one of an adjacent pair, found from the left: each string (or two
        # strings with nothing between them) holds no bracket, and each line's last string is
        # closed. The brackets are all outside strings.
        return marks.translate(None, b'"'), False
    bare = _COMPLETE_STRING.sub(b"", marks)
    if b'"' not in bare:
        return bare, False
    return _OPEN_STRING.sub(b"", bare), True


def lines_within(bare: bytes, limit: int) -> bool:
    """Whether every line of a skeleton nests at most ``limit`` levels and closes what it opens.
    A line's closing brackets that close nothing are let pass: a parser stops at the first."""
    passes = min(_PASSES, limit)
    for _ in range(passes):
        if b"[" not in bare:
            return True
        bare = bare.replace(b"[]", b"")
    if b"[" not in bare:
        return True
    if passes == limit:
        return False
    # What is left of a line is what nests deeper than the passes: its depth plus theirs.
    depth = 0
    for piece in _pieces(bare):
        steps = _as_steps(piece)
        running = pc.cumulative_sum(steps.cast(pa.int32()), start=depth)
        if pc.max(running).as_py() > limit - passes:
            return False
        # Every line so far ends at zero (else it fails here), so the next starts at zero.
        if pc.any(pc.not_equal(pc.filter(running, pc.equal(steps, 0)), 0)).as_py():
            return False
        depth = running[-1].as_py()
    return depth == 0


def _pieces(bare: bytes) -> Iterator[bytes]:
    for start in range(0, len(bare), _PIECE):
        yield bare[start : start + _PIECE]


def _as_steps(piece: bytes) -> pa.Array:
    data = pa.py_buffer(piece.translate(_STEPS))
    return pa.Array.from_buffers(pa.int8(), len(piece), [None, data])


def _running_depth(bare: bytes, depth: int, limit: int) -> tuple[int, bool]:
    """A JSON file's depth after a block's skeleton, from ``depth`` before it; and whether it
    stays from 0 to ``limit`` all along."""
    for piece in _pieces(bare):
        running = pc.cumulative_sum(_as_steps(piece).cast(pa.int32()), start=depth)
        extremes = pc.min_max(running)
        if extremes["max"].as_py() > limit or extremes["min"].as_py() < 0:
            return depth, False
        depth = running[-1].as_py()
    return depth, True


# -- NDJSON: each line on its own --------------------------------------------------------------

_OPENERS_SQUARE = bytes.maketrans(b"{", b"[")
_ALL_BUT_OPENERS = bytes(b for b in range(256) if b not in b"[{\n")


def opening_brackets(text: bytes | bytearray | memoryview) -> bytes | bytearray:
    """The opening brackets of JSON text, in strings or not, all written ``[``, with its line
    breaks: what the lines are counted in. (Deleting alone takes CPython's fast path: a
    quarter faster than deleting and mapping at once; the mapping is then over a few bytes.
    A view is copied first: only ``bytes`` and ``bytearray`` translate.)"""
    if isinstance(text, memoryview):
        text = bytes(text)
    return text.translate(None, _ALL_BUT_OPENERS).translate(_OPENERS_SQUARE)


def openers_within(openers: bytes | bytearray, limit: int) -> bool:
    """Whether no line of :func:`opening_brackets` holds more than ``limit`` of them; no line
    then nests deeper (every level opens one). A line that does may only hold long arrays of
    objects, or brackets in strings: :func:`refuse_deep_lines` looks closer."""
    return b"[" * (limit + 1) not in openers


def refuse_deep_lines(path: Path, block: bytes, *, block_start: int, max_depth: int) -> None:
    """Refuse the batch for the first line of ``block`` (whole lines of ``path`` from byte
    ``block_start``) that nests its record more than
    ``max_depth`` levels, naming its row (the lines before it that are not blank) and field.
    Returns when none does. (A line cut short, or not JSON, is the parsers' to refuse: they
    stop where it goes wrong, no deeper than the line nests.)"""
    limit = max_depth + 1
    bare, _ = skeleton(block)
    if lines_within(bare, limit):
        return  # the brackets were in strings, or closed soon enough
    run = b"[" * (limit + 1)
    rows = 0  # in the block, before the line
    for line in block.split(b"\n"):
        if run in opening_brackets(line):
            fault = _walk(line, limit=limit, per_line=True)
            if fault is not None and fault.kind == "deep":
                problem = RowProblem(
                    row=_rows_before(path, block_start) + rows,
                    field=fault.field,
                    message=_deep_message(max_depth),
                )
                raise _refuse(problem)
        if line.strip():
            rows += 1


def _rows_in(text: bytes) -> int:
    return sum(1 for line in text.split(b"\n") if line.strip())


def _rows_before(path: Path, end: int) -> int:
    """How many lines of ``path`` before byte ``end`` (where a line starts) are not blank."""
    rows, held, done = 0, b"", 0
    with path.open("rb") as f:
        while done < end:
            chunk = f.read(min(BLOCK_BYTES, end - done))
            if not chunk:
                break
            done += len(chunk)
            text = held + chunk
            cut = text.rfind(b"\n") + 1
            rows += _rows_in(text[:cut])
            held = text[cut:]
    return rows + _rows_in(held)


# -- a JSON file as a whole ------------------------------------------------------------------

_BOM = b"\xef\xbb\xbf"
_LEADING_SPACE = re.compile(rb"[ \t\r\n]*")


def _blocks(path: Path) -> Iterator[bytes]:
    """The file in blocks of whole lines (the last may lack its line break)."""
    held = b""
    with path.open("rb") as f:
        while chunk := f.read(BLOCK_BYTES):
            text = held + chunk if held else chunk
            cut = text.rfind(b"\n") + 1
            if cut:
                yield text[:cut]
            held = text[cut:]
    if held:
        yield held


def check_json_document(path: Path, *, max_depth: int, source: str | None) -> None:
    """Refuse a JSON file (an array of records, or records one after another) that nests a
    record more than ``max_depth`` levels deep, closes a bracket it never opened, leaves a
    string open at the end of a line, or ends before it closes what it opened. ``source``
    names the file in a refusal (None: "the input")."""
    size = path.stat().st_size
    depth = done = 0
    line = 1  # where the block starts
    in_array: bool | None = None
    limit = max_depth + 1
    for index, block in enumerate(_blocks(path)):
        if in_array is None:
            start = len(_BOM) if block.startswith(_BOM) else 0
            first = _LEADING_SPACE.match(block, start)
            if first is not None and first.end() < len(block):
                in_array = block[first.end()] == b"["[0]
                limit = max_depth + (2 if in_array else 1)
        bare, open_string = skeleton(block)
        after, within = _running_depth(bare, depth, limit)
        done += len(block)
        if open_string or not within:
            fault = _walk(
                block,
                limit=limit,
                depth=depth,
                key_depth=2 if in_array else 1,
                in_array=bool(in_array),
            )
            raise _document_refusal(
                fault,
                block,
                line=line,
                row=partial(_elements_before, path, index) if in_array else None,
                at_end=done == size,
                max_depth=max_depth,
                source=source,
            )
        depth = after
        line += bare.count(b"\n")
    if depth > 0:
        ends_at = line - 1 if done and _ends_with_line_break(path) else line
        what = "the array" if in_array else "the last object"
        raise _not_complete(source, what, ends_at)


def _ends_with_line_break(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def _document_refusal(
    fault: _Fault | None,
    block: bytes,
    *,
    line: int,
    row: Callable[[], int] | None,
    at_end: bool,
    max_depth: int,
    source: str | None,
) -> BatchRejectedError:
    if fault is None or fault.kind == "open":
        # The walk reads strings as JSON does; only a backslash outside any string (never
        # valid) makes the skeleton read them otherwise.
        message = f"invalid JSON: brackets and strings do not pair up (from line {line})"
        return _refuse(RowProblem(row=None, field=None, message=message))
    at_line, column = _position(block, fault.at, first_line=line)
    where = f"(line {at_line}, column {column})"
    if fault.kind == "deep":
        at_row = None if row is None else row() + fault.elements
        message = f"{_deep_message(max_depth)} {where}"
        return _refuse(RowProblem(row=at_row, field=fault.field, message=message))
    if fault.kind == "extra":
        message = f"invalid JSON: a closing bracket closes nothing {where}"
        return _refuse(RowProblem(row=None, field=None, message=message))
    if at_end and b"\n" not in block[fault.at :].rstrip():
        return _not_complete(source, "a string", at_line)  # the file ends inside it
    message = f"invalid JSON: a string is not closed before its line ends {where}"
    return _refuse(RowProblem(row=None, field=None, message=message))


def _not_complete(source: str | None, what: str, line: int) -> BatchRejectedError:
    name = source or "the input"
    message = f"invalid JSON: {name} is not complete: {what} is not closed (it ends at line {line})"
    return _refuse(RowProblem(row=None, field=None, message=message))


_ALL_BUT_MARKS_AND_COMMAS = bytes(b for b in range(256) if b not in b'[]{}",\n')
_COMMA_STEPS = bytes.maketrans(b"[],", b"\x01\xff\x00")


def _elements_before(path: Path, blocks: int) -> int:
    """How many elements of the top-level array the file's first ``blocks`` blocks close (its
    commas at depth 1). Those blocks passed the scan: their strings close within their line."""
    elements = depth = 0
    for _, block in zip(range(blocks), _blocks(path), strict=False):
        if b"\\" in block:
            block = block.replace(b"\\\\", b"").replace(b'\\"', b"")
        marks = block.translate(_SQUARE, _ALL_BUT_MARKS_AND_COMMAS)
        marks = _COMPLETE_STRING.sub(b"", marks).replace(b"\n", b"")
        for piece in _pieces(marks):
            data = pa.py_buffer(piece.translate(_COMMA_STEPS))
            steps = pa.Array.from_buffers(pa.int8(), len(piece), [None, data])
            running = pc.cumulative_sum(steps.cast(pa.int32()), start=depth)
            commas = pc.and_(pc.equal(steps, 0), pc.equal(running, 1))
            elements += pc.sum(commas.cast(pa.int64())).as_py() or 0
            depth = running[-1].as_py()
    return elements


# -- where a scan that failed failed: the slow part, run only then ---------------------------

_TOKEN = re.compile(rb'"(?:[^"\\\n]|\\.)*"|["\[\]{}:,]')
_QUOTE, _COLON, _COMMA = b'"'[0], b":"[0], b","[0]
_OPENERS = frozenset(b"[{")
_KINDS = {b"["[0]: "an array", b"{"[0]: "an object"}


@dataclass(frozen=True, slots=True)
class _Fault:
    """The first fault a walk finds: a bracket nesting past the limit ("deep"), a string not
    closed before its line ends ("string"), a bracket closing nothing ("extra"), or brackets
    left open at the text's end ("open", ``open_kind`` the innermost)."""

    kind: Literal["deep", "string", "extra", "open"]
    at: int
    field: str | None
    # Elements of the top-level array that the walk saw end before the fault (commas at 1).
    elements: int = 0
    open_kind: str = "a bracket"


def _walk(
    text: bytes,
    *,
    limit: int,
    depth: int = 0,
    key_depth: int = 1,
    in_array: bool = False,
    per_line: bool = False,
) -> _Fault | None:
    """The first fault of JSON text read from a point at ``depth``, with the field it is in
    (a record's key, at ``key_depth``). ``per_line``: the text is one line of NDJSON, where a
    bracket closing nothing starts the line over (a parser stops there; what follows is
    still walked, so that no line is let pass because of one)."""
    opened: list[int] = []  # the brackets opened here and not closed (at most ``limit``)
    key: str | None = None
    candidate: bytes | None = None
    elements = 0
    for token in _TOKEN.finditer(text):
        first = text[token.start()]
        if first == _QUOTE:
            if token.end() - token.start() == 1:
                return _Fault("string", token.start(), key, elements)
            candidate = token.group() if depth == key_depth else None
            continue
        if first == _COLON:
            if candidate is not None:
                key = _key(candidate)
        elif first in _OPENERS:
            depth += 1
            if depth > limit:
                field = key if depth > key_depth else None
                return _Fault("deep", token.start(), field, elements)
            opened.append(first)
        elif first == _COMMA:
            if in_array and depth == 1:
                elements += 1
        else:  # a closing bracket
            depth -= 1
            if depth < 0:
                if not per_line:
                    return _Fault("extra", token.start(), None, elements)
                depth = 0
            if opened:
                opened.pop()
            if depth < key_depth:
                key = None
        candidate = None
    if depth > 0:
        kind = _KINDS[opened[-1]] if opened else "a bracket"
        return _Fault("open", len(text), key, elements, kind)
    return None


def _key(token: bytes) -> str:
    """A key's text (its escapes read), from its token with quotes."""
    try:
        key = orjson.loads(token)
    except orjson.JSONDecodeError:
        return token[1:-1].decode("utf-8", errors="replace")
    return key if isinstance(key, str) else str(key)


def _position(text: bytes, at: int, *, first_line: int) -> tuple[int, int]:
    """The line (``text`` starting at line ``first_line``) and column (in characters) of
    byte ``at`` of ``text``."""
    line_start = text.rfind(b"\n", 0, at) + 1
    column = len(text[line_start:at].decode("utf-8", errors="replace")) + 1
    return first_line + text.count(b"\n", 0, at), column


def _deep_message(max_depth: int) -> str:
    return f"JSON is nested more than {max_depth} levels deep"


def _refuse(problem: RowProblem) -> BatchRejectedError:
    return BatchRejectedError(f"batch refused: {problem}", problems=(problem,))
