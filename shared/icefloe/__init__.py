"""icefloe: a serverless Parquet merge engine for event data on object storage."""

__version__ = "0.1.0"
