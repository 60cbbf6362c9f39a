-- Which process runs a local compaction job ("<host>:<pid>:<process start>"; NULL for a job
-- EMR Serverless runs), so that the janitor can settle a job whose process is gone at once
-- instead of after its claims' lease.
ALTER TABLE compaction_jobs ADD COLUMN runner text;
