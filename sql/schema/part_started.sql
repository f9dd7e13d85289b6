-- Whether a part's migrations have been recorded before ($1: its record's table name).
SELECT to_regclass($1) IS NOT NULL
