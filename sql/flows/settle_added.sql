-- A settle hint: the edges of finished jobs $1 that a transaction committed after they
-- finished, at most $2 of them (skiplock._settle_added); returns the jobs another transaction
-- was writing (to try again) and the jobs that may have edges left (for the slices).
SELECT s.busy, s.left_over FROM skiplock._settle_added($1::bigint[], $2::integer) s
