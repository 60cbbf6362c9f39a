-- Delete jobs of the deployed stack: a delete planned once, its files held under one claim,
-- rewritten part by part (one partition each) by merge workers, and committed as one snapshot
-- once every part is done. A part's rewrites are recorded before the commit, so a worker that
-- dies after its part is done loses nothing, and a redelivered part changes nothing.
CREATE TABLE delete_jobs (
    job_id        uuid PRIMARY KEY,
    table_id      bigint NOT NULL REFERENCES lake_tables (table_id) ON DELETE CASCADE,
    predicate     text NOT NULL,
    -- The snapshot the delete planned over; rows committed later are not deleted.
    planned_at    bigint NOT NULL,
    -- Every planned file is claimed under this token until the job ends (merges skip them).
    claim_token   uuid NOT NULL,
    lease_until   timestamptz NOT NULL,
    state         text NOT NULL CHECK (state IN ('running', 'committed', 'failed')),
    snapshot_id   bigint,
    error         text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX delete_jobs_running ON delete_jobs (created_at) WHERE state = 'running';
CREATE INDEX delete_jobs_by_table ON delete_jobs (table_id, created_at);

CREATE TABLE delete_parts (
    job_id        uuid NOT NULL REFERENCES delete_jobs (job_id) ON DELETE CASCADE,
    part          integer NOT NULL,
    partition_path text NOT NULL,
    file_ids      bigint[] NOT NULL,
    done_at       timestamptz,
    -- Once done: the files it changed (removed or rewritten), the rewrites, the rows deleted.
    changed_ids   bigint[],
    added         jsonb,
    rows_deleted  bigint,
    PRIMARY KEY (job_id, part)
);
