-- The first $2 jobs of flow $1 by id, with names, states and how many dependencies each still
-- waits for.
SELECT name, id, kind, state, pending FROM skiplock.flow_members($1) LIMIT $2
