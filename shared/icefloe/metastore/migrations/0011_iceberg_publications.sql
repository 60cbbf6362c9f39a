-- Iceberg publications: each Iceberg snapshot icefloe committed for a table, in one catalog
-- (its name and namespace), with the icefloe snapshot it shows. While a publication is
-- retained (expired_at NULL), the janitor expires no icefloe snapshot from that one on, so no
-- file an Iceberg reader can still reach is collected. A publication is recorded before its
-- Iceberg commit (iceberg_snapshot_id is filled in after it), and expired once its Iceberg
-- snapshot has been expired from the catalog (or its commit never happened).
CREATE TABLE iceberg_publications (
    table_id            bigint NOT NULL REFERENCES lake_tables (table_id) ON DELETE CASCADE,
    catalog             text NOT NULL,
    snapshot_id         bigint NOT NULL,
    iceberg_snapshot_id bigint,
    published_at        timestamptz NOT NULL DEFAULT now(),
    expired_at          timestamptz,
    PRIMARY KEY (table_id, catalog, snapshot_id)
);
CREATE INDEX iceberg_publications_retained ON iceberg_publications (table_id, snapshot_id)
    WHERE expired_at IS NULL;
