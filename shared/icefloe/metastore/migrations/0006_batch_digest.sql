-- A digest of the batch an idempotency key committed, so that a retry with other content is
-- refused rather than answered "already committed" while its rows are dropped.
ALTER TABLE snapshots ADD COLUMN batch_digest text;
