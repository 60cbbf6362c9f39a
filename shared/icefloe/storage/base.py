"""The object store contract: write-once objects under `/`-separated keys.

Keys are relative to the warehouse root. Objects are never overwritten (names are never reused),
so ``put`` refuses an existing key instead of replacing it.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from icefloe.errors import InvalidInputError

logger = logging.getLogger(__name__)

# S3's limit on a key's UTF-8 length; the local store keeps the same limit so both agree.
MAX_KEY_BYTES = 1024


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One stored object: its key (relative to the store root), size in bytes, UTC mtime."""

    key: str
    size: int
    last_modified: datetime


@dataclass(frozen=True, slots=True)
class AbandonedWrite:
    """A write that never finished (its writer died): a temporary file beside where the object
    would have gone (local), or an incomplete multipart upload (S3). ``key`` is where it lies
    (the temporary file) or was going (the upload's object key); ``handle`` is what discarding
    it needs (the upload id; empty locally)."""

    key: str
    started: datetime
    size: int
    handle: str = ""


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """Outcome of :meth:`ObjectStore.delete_many`.

    ``deleted`` counts the distinct keys confirmed absent afterwards, including keys that were
    already missing: S3 cannot tell the two apart, so the local store counts the same way.
    """

    deleted: int


_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")


# Keys as icefloe writes them (``events/data/day=2026-11-02/<hex>.parquet``): plain ASCII
# segments, none of them "." or "..". One match accepts them; anything else gets every check.
_PLAIN_SEGMENT = r"(?!\.{1,2}(?:/|$))[A-Za-z0-9._=%+\-]+"
_PLAIN_KEY = re.compile(rf"{_PLAIN_SEGMENT}(?:/{_PLAIN_SEGMENT})*")


def validate_key(key: str) -> str:
    """Return ``key`` if it is a well-formed object key, else raise InvalidInputError.

    Refuses what could escape the root or alias another key: empty keys, a leading or trailing
    ``/``, empty, ``.`` or ``..`` segments, backslashes, NUL and other control characters.
    """
    if isinstance(key, str) and len(key) <= MAX_KEY_BYTES and _PLAIN_KEY.fullmatch(key):
        return key
    if not isinstance(key, str) or not key:
        raise InvalidInputError(f"object key {key!r}: must be a non-empty string")
    if key.startswith("/"):
        raise InvalidInputError(f"object key {key!r}: must be relative (no leading '/')")
    if key.endswith("/"):
        raise InvalidInputError(f"object key {key!r}: must not end with '/'")
    if "\\" in key:
        raise InvalidInputError(f"object key {key!r}: backslashes are not allowed")
    if not _PRINTABLE_ASCII.fullmatch(key) and any(
        unicodedata.category(ch) in ("Cc", "Cs") for ch in key
    ):
        raise InvalidInputError(
            f"object key {key!r}: control and lone surrogate characters are not allowed"
        )
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidInputError(f"object key {key!r}: longer than {MAX_KEY_BYTES} UTF-8 bytes")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidInputError(
                f"object key {key!r}: empty, '.' and '..' segments are not allowed"
            )
    return key


def is_valid_key(key: str) -> bool:
    """Whether ``key`` passes :func:`validate_key`; listings skip names that do not."""
    try:
        validate_key(key)
    except InvalidInputError:
        return False
    return True


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is a valid listing prefix: empty, a key, or a key plus ``/``."""
    if not isinstance(prefix, str):
        raise InvalidInputError(f"object key prefix {prefix!r}: must be a string")
    if prefix:
        body = prefix[:-1] if prefix.endswith("/") else prefix
        try:
            validate_key(body)
        except InvalidInputError as e:
            raise InvalidInputError(f"object key prefix {prefix!r}: {e}") from e
    return prefix


def check_range(start: int, length: int) -> None:
    """Refuse a byte range HTTP cannot express: negative start, or length below one."""
    if start < 0:
        raise InvalidInputError(f"range start {start}: must be >= 0")
    if length < 1:
        raise InvalidInputError(f"range length {length}: must be >= 1")


class ObjectStore(ABC):
    """Write-once object storage under one root (a local directory or an S3 prefix)."""

    @property
    @abstractmethod
    def root_uri(self) -> str:
        """The root as DuckDB and pyarrow address it: an absolute path or ``s3://bucket/prefix``."""

    @abstractmethod
    def uri(self, key: str) -> str:
        """The address of ``key`` for readers outside this module (DuckDB, pyarrow)."""

    @property
    def max_key_bytes(self) -> int:
        """The longest key this store takes, in UTF-8 bytes (S3's limit, less any prefix the
        store puts before every key)."""
        return MAX_KEY_BYTES

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``; ObjectExistsError if the key is taken (never overwrites).
        Nothing is returned: on S3, the object's metadata would cost a HEAD per write (an
        insert's latency), and no writer needs it; :meth:`head` reads it."""

    @abstractmethod
    def put_file(self, key: str, path: Path) -> None:
        """Store the content of the local file ``path`` under ``key``, with ``put``'s semantics."""

    @abstractmethod
    def copy(self, source: str, key: str) -> ObjectInfo:
        """Store a copy of the object under ``source`` as ``key`` (inside the store: S3 copies
        it server-side); ObjectNotFoundError if ``source`` is gone, ``put``'s semantics else."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object; ObjectNotFoundError if there is none."""

    @abstractmethod
    def get_range(self, key: str, *, start: int, length: int) -> bytes:
        """Up to ``length`` bytes from offset ``start``.

        Fewer bytes at the end of the object, and ``b""`` when ``start`` is at or past the end
        (as a file read would); ObjectNotFoundError if there is no object.
        """

    @abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """The object's metadata, or ``None`` if there is no object under ``key``."""

    @abstractmethod
    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        """Delete every key; missing keys are fine. All keys are validated before any delete."""

    @abstractmethod
    def download_url(self, key: str, *, expires_s: int) -> str:
        """A URL the caller can fetch the object from: presigned for S3, ``file://`` locally."""

    @abstractmethod
    def list_prefix(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (a plain string prefix), by key order.

        Order is by code point, which is S3's UTF-8 byte order.
        """

    @abstractmethod
    def abandoned_writes(self, prefix: str, *, started_before: datetime) -> list[AbandonedWrite]:
        """Unfinished writes under ``prefix`` that started before ``started_before`` (a write
        in flight is never that old when the cut-off is past every writer's time limit)."""

    @abstractmethod
    def discard_abandoned_writes(self, writes: Iterable[AbandonedWrite]) -> int:
        """Remove these unfinished writes (gone already is fine); returns how many."""


def discard_uncommitted(objects: ObjectStore, keys: Sequence[str]) -> None:
    """Delete objects a writer stored but did not commit; a failure is logged, not raised
    (the janitor's orphan sweep removes what this could not)."""
    if not keys:
        return
    try:
        objects.delete_many(keys)
    except Exception:
        logger.exception("could not delete %d uncommitted objects", len(keys))
