-- The benchmark's own database. {db} is replaced by a name the benchmark made
-- (skiplock_bench_ and eight hex digits; checked before use): CREATE DATABASE takes no parameter.
CREATE DATABASE {db}
