-- A 304 for page $1: only last_fetched ($2) and next_fetch ($3) move.
UPDATE skiplock.pages SET last_fetched = $2, next_fetch = $3, updated_at = now() WHERE url = $1
