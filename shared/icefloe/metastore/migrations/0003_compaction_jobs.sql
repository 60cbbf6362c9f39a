-- Heavy compaction jobs (EMR Serverless or local Spark): which job holds which claims, so a
-- failed or cancelled job's claims are released and its uncommitted outputs deleted, by the
-- job-state event handler or, when that event is lost, by the janitor's reconciliation.

CREATE TABLE compaction_jobs (
    job_id        text PRIMARY KEY,
    table_id      bigint NOT NULL REFERENCES lake_tables (table_id) ON DELETE CASCADE,
    -- The EMR Serverless application and job run id, once started (null for local runs).
    application_id text,
    job_run_id    text UNIQUE,
    state         text NOT NULL,
    claim_tokens  uuid[] NOT NULL,
    manifest_key  text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    -- Set once the job's claims were released and its outputs cleaned up (or it succeeded).
    settled_at    timestamptz
);

CREATE INDEX compaction_jobs_open ON compaction_jobs (created_at) WHERE settled_at IS NULL;
