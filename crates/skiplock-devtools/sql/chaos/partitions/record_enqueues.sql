-- The driver's enqueues and their results, at the end of a run ($7, $8: each op's job numbers
-- and ids as comma-separated text, since Postgres arrays cannot be ragged).
INSERT INTO skiplock_faults.enqueues (op, what, ok, outcome, error, at, ns, ids)
SELECT op, what, ok, outcome, error, at,
       coalesce(string_to_array(nullif(ns, ''), ',')::bigint[], '{}'),
       coalesce(string_to_array(nullif(ids, ''), ',')::bigint[], '{}')
FROM unnest($1::integer[], $2::text[], $3::boolean[], $4::text[], $5::text[], $6::timestamptz[],
            $7::text[], $8::text[]) AS u(op, what, ok, outcome, error, at, ns, ids)
