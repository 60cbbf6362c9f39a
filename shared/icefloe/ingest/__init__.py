"""Insert: JSON events (and CSV or Parquet) to partitioned, sorted Parquet in one snapshot."""

from icefloe.ingest.insert import Inserter, InsertResult
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.ingest.sources import INPUT_FORMATS, InputFormat, InsertLimits, format_from_suffix

__all__ = [
    "INPUT_FORMATS",
    "ROW_ID_COLUMN",
    "InputFormat",
    "InsertLimits",
    "InsertResult",
    "Inserter",
    "format_from_suffix",
]
