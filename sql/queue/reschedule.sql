-- Reschedules waiting jobs by id or unique key: the ids changed.
SELECT id FROM skiplock.reschedule($1, $2, $3, $4, $5, $6, $7) AS r(id)
