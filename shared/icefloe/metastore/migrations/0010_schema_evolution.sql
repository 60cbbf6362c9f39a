-- Schema evolution. A table's spec has a version (lake_tables.spec_version, and "version" in
-- the spec itself); an alter writes the next version and commits a snapshot that changes no
-- file. Every version's spec is kept, so that a query pinned at a snapshot reads with the
-- schema of that snapshot; every snapshot and every file records the version it was
-- committed or written at, so that readers map a file's columns to the current ones by id.
CREATE TABLE table_specs (
    table_id      bigint NOT NULL REFERENCES lake_tables (table_id) ON DELETE CASCADE,
    spec_version  integer NOT NULL CHECK (spec_version > 0),
    spec          jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_id, spec_version)
);
INSERT INTO table_specs (table_id, spec_version, spec)
    SELECT table_id, spec_version, spec FROM lake_tables;

ALTER TABLE snapshots ADD COLUMN spec_version integer NOT NULL DEFAULT 1;
ALTER TABLE data_files ADD COLUMN spec_version integer NOT NULL DEFAULT 1;
-- A delete job runs its parts with the spec its predicate was checked and planned against.
ALTER TABLE delete_jobs ADD COLUMN spec_version integer NOT NULL DEFAULT 1;
ALTER TABLE snapshots DROP CONSTRAINT snapshots_operation_check;
ALTER TABLE snapshots ADD CONSTRAINT snapshots_operation_check
    CHECK (operation IN ('append', 'replace', 'delete', 'rollback', 'alter'));
