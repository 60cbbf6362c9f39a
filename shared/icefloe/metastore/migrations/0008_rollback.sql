-- Rollback: a snapshot whose live files are exactly those of an earlier snapshot of the same
-- table. It records which snapshot it restored, so the history reads "rollback to N".
ALTER TABLE snapshots DROP CONSTRAINT snapshots_operation_check;
ALTER TABLE snapshots ADD CONSTRAINT snapshots_operation_check
    CHECK (operation IN ('append', 'replace', 'delete', 'rollback'));
ALTER TABLE snapshots ADD COLUMN rolled_back_to bigint;
-- A file a rollback restored is a copy of an earlier file's object: the original's id (the
-- first original's, for a copy of a copy), so that a rollback asked again sees the copy as
-- the file it restores and changes nothing.
ALTER TABLE data_files ADD COLUMN copy_of bigint;
