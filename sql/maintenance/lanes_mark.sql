-- Step 1 of the lanes' upkeep (sql/api/50_maintenance.sql): wake, register and mark; returns
-- how many rows it marked.
SELECT skiplock._lanes_mark()
