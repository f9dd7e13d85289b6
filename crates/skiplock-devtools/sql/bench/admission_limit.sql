-- The admission phase's limit on the bench queue ($1: at most so many waiting; NULL: none):
-- docs/operations.md, "Admission control".
SELECT skiplock.set_queue_admission('bench', $1)
