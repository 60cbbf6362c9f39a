-- icefloe meta store, version 1: tables, snapshots, files.
-- Applied inside one transaction with search_path set to the icefloe schema.

CREATE TABLE lake_tables (
    table_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name              text NOT NULL UNIQUE,
    spec              jsonb NOT NULL,
    spec_version      integer NOT NULL DEFAULT 1,
    -- 0 until the first commit; a commit takes head + 1 while holding this row's lock.
    head_snapshot_id  bigint NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE snapshots (
    table_id         bigint NOT NULL REFERENCES lake_tables (table_id) ON DELETE CASCADE,
    snapshot_id      bigint NOT NULL CHECK (snapshot_id > 0),
    parent_id        bigint,
    operation        text NOT NULL CHECK (operation IN ('append', 'replace', 'delete')),
    committed_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    idempotency_key  text,
    files_added      integer NOT NULL,
    files_removed    integer NOT NULL,
    rows_added       bigint NOT NULL,
    rows_removed     bigint NOT NULL,
    bytes_added      bigint NOT NULL,
    bytes_removed    bigint NOT NULL,
    -- Set by the janitor: time travel to an expired snapshot is refused.
    expired_at       timestamptz,
    PRIMARY KEY (table_id, snapshot_id),
    UNIQUE (table_id, idempotency_key)
);

CREATE INDEX snapshots_by_time ON snapshots (table_id, committed_at);

CREATE TABLE data_files (
    file_id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_id          bigint NOT NULL REFERENCES lake_tables (table_id) ON DELETE CASCADE,
    -- Object key relative to the warehouse root; names are never reused.
    path              text NOT NULL UNIQUE,
    partition_path    text NOT NULL,
    partition_values  jsonb NOT NULL,
    -- Lower bound (UTC) of the period of the spec's first time partition field: the index
    -- below lists one day's files in O(log n + k) whatever the table's size.
    partition_start   timestamp,
    size_bytes        bigint NOT NULL CHECK (size_bytes >= 0),
    row_count         bigint NOT NULL CHECK (row_count >= 0),
    row_group_count   integer NOT NULL CHECK (row_group_count >= 0),
    column_stats      jsonb NOT NULL DEFAULT '{}'::jsonb,
    begin_snapshot    bigint NOT NULL,
    end_snapshot      bigint,
    removed_at        timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    claim_token       uuid,
    claim_expires_at  timestamptz,
    CHECK (end_snapshot IS NULL OR end_snapshot > begin_snapshot)
);

-- Live files of a partition (merge planning, status, head reads).
CREATE INDEX data_files_live ON data_files (table_id, partition_path) WHERE end_snapshot IS NULL;
-- A time range at any snapshot (queries, time travel).
CREATE INDEX data_files_by_time ON data_files (table_id, partition_start) INCLUDE (begin_snapshot, end_snapshot);
-- Every version of a partition (time travel without a time predicate on a partitioned table).
CREATE INDEX data_files_by_partition ON data_files (table_id, partition_path, begin_snapshot);
-- Dead files, for garbage collection.
CREATE INDEX data_files_dead ON data_files (table_id, end_snapshot) WHERE end_snapshot IS NOT NULL;
