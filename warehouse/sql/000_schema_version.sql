-- Which SQL steps built this warehouse: one row per file of warehouse/sql and one for the core step
-- generated from warehouse/tables.py, each with the sha256 of its text (warehouse/build.py fills it).
-- `version` is warehouse.build.SCHEMA_VERSION; readers and carry-over refuse other versions.
CREATE TABLE schema_version (
    version    INTEGER NOT NULL,
    sql_file   VARCHAR NOT NULL,
    sha256     VARCHAR NOT NULL,
    applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (sql_file)
);
