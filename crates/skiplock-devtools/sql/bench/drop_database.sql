-- Drops the benchmark's database, closing whatever is still connected to it ({db} as above).
DROP DATABASE IF EXISTS {db} WITH (FORCE)
