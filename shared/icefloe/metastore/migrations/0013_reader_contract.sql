-- The reader contract, version 1: what a program in any language needs to read a snapshot of
-- a table with nothing but a Postgres client and a Parquet reader. These functions are the
-- stable interface to the meta store; the tables behind them are not. Later migrations keep
-- each function's name, arguments and result columns (they may add result columns at the
-- end); a contract that had to break them would be version 2, under new names. Each function
-- runs with the search path of this schema, whatever the caller's.
--
-- A snapshot is named by the table's name and a snapshot id (NULL: the table's head). An
-- expired snapshot, a dropped table or an unknown id gives no rows.

CREATE FUNCTION icefloe_reader_contract() RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$ SELECT 1 $$;

-- The snapshot: the table's id, the snapshot's id, and the version of the table's schema the
-- snapshot reads with.
CREATE FUNCTION icefloe_snapshot(table_name text, snapshot bigint DEFAULT NULL)
RETURNS TABLE (table_id bigint, snapshot_id bigint, spec_version integer)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT t.table_id, s.snapshot_id, s.spec_version
    FROM lake_tables AS t
    JOIN snapshots AS s ON s.table_id = t.table_id
    WHERE t.name = table_name
      AND t.dropped_at IS NULL
      AND s.snapshot_id = coalesce(snapshot, t.head_snapshot_id)
      AND s.expired_at IS NULL
$$;

-- The snapshot's files: every row of the snapshot is in exactly one of them. ``path`` is the
-- object's key under the warehouse root (ICEFLOE_WAREHOUSE); ``spec_version`` is the schema
-- version the file was written at (see icefloe_file_columns).
CREATE FUNCTION icefloe_snapshot_files(table_name text, snapshot bigint DEFAULT NULL)
RETURNS TABLE (
    path text,
    partition_path text,
    partition_values jsonb,
    size_bytes bigint,
    row_count bigint,
    spec_version integer
)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT f.path, f.partition_path, f.partition_values, f.size_bytes, f.row_count,
           f.spec_version
    FROM icefloe_snapshot(table_name, snapshot) AS s
    JOIN data_files AS f ON f.table_id = s.table_id
    WHERE f.begin_snapshot <= s.snapshot_id
      AND (f.end_snapshot IS NULL OR f.end_snapshot > s.snapshot_id)
    ORDER BY f.path
$$;

-- The snapshot's columns, in order: name, DuckDB type, whether NULL is allowed, the column's
-- id (it never changes, whatever renames), and a generated column's expression (NULL for the
-- others). Every file also holds ``_row_id`` (16 bytes, unique per row), which is not listed.
CREATE FUNCTION icefloe_table_columns(table_name text, snapshot bigint DEFAULT NULL)
RETURNS TABLE (
    "position" integer,
    name text,
    type text,
    nullable boolean,
    column_id integer,
    expression text
)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT c.n::integer, c.col ->> 'name', c.col ->> 'type',
           coalesce((c.col ->> 'nullable')::boolean, true),
           -- a spec from before column ids (migration 10) numbers its columns 1..n
           coalesce((ts.spec -> 'column_ids' ->> (c.n - 1)::integer)::integer, c.n::integer),
           c.col ->> 'expression'
    FROM icefloe_snapshot(table_name, snapshot) AS s
    JOIN table_specs AS ts ON ts.table_id = s.table_id AND ts.spec_version = s.spec_version
    CROSS JOIN LATERAL jsonb_array_elements(ts.spec -> 'columns') WITH ORDINALITY AS c(col, n)
    ORDER BY c.n
$$;

-- How to read each file as the snapshot's columns: for every file and every column, the name
-- and type the column has in that file (renamed and widened columns keep their old name and
-- type in files written before the change). Read ``file_column`` and cast it to ``type``; where
-- ``file_column`` is NULL the file lacks the column: read NULL, or, for a generated column,
-- compute its expression over the row's other columns.
CREATE FUNCTION icefloe_file_columns(table_name text, snapshot bigint DEFAULT NULL)
RETURNS TABLE (
    path text,
    "position" integer,
    name text,
    type text,
    file_column text,
    file_type text
)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    WITH held AS (
        SELECT ts.spec_version,
               coalesce((ts.spec -> 'column_ids' ->> (c.n - 1)::integer)::integer, c.n::integer)
                   AS column_id,
               c.col ->> 'name' AS name,
               c.col ->> 'type' AS type
        FROM icefloe_snapshot(table_name, snapshot) AS s
        JOIN table_specs AS ts ON ts.table_id = s.table_id
        CROSS JOIN LATERAL jsonb_array_elements(ts.spec -> 'columns') WITH ORDINALITY AS c(col, n)
    )
    SELECT f.path, c."position", c.name, c.type, h.name, h.type
    FROM icefloe_snapshot_files(table_name, snapshot) AS f
    CROSS JOIN icefloe_table_columns(table_name, snapshot) AS c
    LEFT JOIN held AS h ON h.spec_version = f.spec_version AND h.column_id = c.column_id
    ORDER BY f.path, c."position"
$$;
