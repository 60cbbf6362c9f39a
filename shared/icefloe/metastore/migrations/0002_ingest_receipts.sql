-- Per-message receipts: which delivered message (an SQS message id) went into which snapshot.
-- A redelivered message is recognised however the queue regroups it, so each message is
-- committed once. The janitor prunes receipts older than any redelivery can be.

CREATE TABLE ingest_receipts (
    table_id     bigint NOT NULL REFERENCES lake_tables (table_id) ON DELETE CASCADE,
    receipt      text NOT NULL,
    snapshot_id  bigint NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_id, receipt)
);

CREATE INDEX ingest_receipts_by_time ON ingest_receipts (received_at);
