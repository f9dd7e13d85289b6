-- Hold limit key $2 of queue $1 until $3 (skiplock.hold_key): how many waiting jobs moved.
SELECT skiplock.hold_key($1, $2, $3)
