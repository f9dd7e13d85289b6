-- Step 2 of the lanes' upkeep: the rows marked, and the transactions writing jobs now.
SELECT lane_rows, key_rows, writers FROM skiplock._lanes_marked()
