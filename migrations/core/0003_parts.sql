-- skiplock's schema comes in parts (docs/internals.md, "The schema in parts"): the core (the
-- queue: jobs, workers, limits, maintenance) and each built-in workflow's tables, installed
-- only by a program built with that workflow. Each part has its own migrations
-- (migrations/<part>/, recorded in skiplock.migrations_<part>) and SQL API files; this table
-- records which build installed each workflow part's SQL API (the core's is
-- skiplock.schema_info), so a worker with a workflow refuses a database where it is missing
-- or another build's.
CREATE TABLE skiplock.schema_parts (
    part         text NOT NULL,
    api_hash     text NOT NULL,
    migrated_by  text NOT NULL,
    migrated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schema_parts_pkey PRIMARY KEY (part),
    CONSTRAINT schema_parts_part_check CHECK (part ~ '^[a-z]+$'),
    CONSTRAINT schema_parts_migrated_at_check CHECK (skiplock._time_ok(migrated_at))
);

-- The names only skiplock's own functions may enqueue under: job kinds, queues, queue name
-- prefixes and unique-key prefixes. Each part's SQL API file writes its rows; the generic
-- enqueue refuses them, naming `use_instead` (skiplock._reserved_job and
-- skiplock._reserved_key_prefix are built from these rows at every migrate: sql/api/80_reserved.sql).
CREATE TABLE skiplock.reserved_names (
    part         text NOT NULL,
    what         text NOT NULL,
    name         text NOT NULL,
    use_instead  text NOT NULL,
    CONSTRAINT reserved_names_pkey PRIMARY KEY (what, name),
    CONSTRAINT reserved_names_what_check CHECK (what IN ('kind', 'queue', 'queue_prefix', 'key_prefix')),
    CONSTRAINT reserved_names_name_check CHECK (name <> '' AND length(name) <= 200)
);
