-- The fetch queue's politeness: one start per $1 seconds and one fetch at a time per host key.
SELECT skiplock.set_politeness($1::float8 * interval '1 second')
