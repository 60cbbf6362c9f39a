-- Big-scan query jobs on EMR Serverless (icefloe.emr_query) get a table of their own: they
-- were recorded in compaction_jobs with no claims. A query job holds no claim and writes no
-- file of the lake; its record is settled from the job run's end state and forgotten, with its
-- request object, after a while.

CREATE TABLE query_jobs (
    job_id        text PRIMARY KEY,
    -- The table it is recorded under (the first the query names; its request object lives
    -- under that table's jobs/ prefix): dropping and purging the table forgets the job.
    table_id      bigint NOT NULL REFERENCES lake_tables (table_id) ON DELETE CASCADE,
    -- The EMR Serverless application and job run id, once started.
    application_id text,
    job_run_id    text UNIQUE,
    state         text NOT NULL,
    -- The request object (<table>/jobs/<job id>.json: the SELECT, the pinned snapshots).
    request_key   text NOT NULL,
    -- Where the job writes its result; NULL for a job recorded before this table (its
    -- request object says).
    result_uri    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    -- Set once the job run ended (or was given up on).
    settled_at    timestamptz
);

CREATE INDEX query_jobs_open ON query_jobs (created_at) WHERE settled_at IS NULL;

-- The query jobs recorded in compaction_jobs: a "query-" job id, and no claims.
INSERT INTO query_jobs (
    job_id, table_id, application_id, job_run_id, state, request_key,
    created_at, updated_at, settled_at
)
SELECT job_id, table_id, application_id, job_run_id, state, manifest_key,
       created_at, updated_at, settled_at
FROM compaction_jobs
WHERE job_id LIKE 'query-%' AND cardinality(claim_tokens) = 0;

DELETE FROM compaction_jobs WHERE job_id LIKE 'query-%' AND cardinality(claim_tokens) = 0;
