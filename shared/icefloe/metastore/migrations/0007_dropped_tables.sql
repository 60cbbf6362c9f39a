-- Dropped tables: a drop marks the row (queries, inserts and merges stop seeing the table at
-- once) and the janitor deletes its objects and rows after the table's retention. Only live
-- tables need unique names, so a table of the same name can be created right after a drop.
ALTER TABLE lake_tables ADD COLUMN dropped_at timestamptz;
ALTER TABLE lake_tables DROP CONSTRAINT lake_tables_name_key;
CREATE UNIQUE INDEX lake_tables_live_name ON lake_tables (name) WHERE dropped_at IS NULL;
CREATE INDEX lake_tables_dropped ON lake_tables (dropped_at) WHERE dropped_at IS NOT NULL;
