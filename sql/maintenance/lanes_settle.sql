-- Step 3 of the lanes' upkeep: decide rows $1 (lanes) and $2 (fair queues' keys) again;
-- returns how many it removed.
SELECT skiplock._lanes_settle($1::text[], $2::text[])
