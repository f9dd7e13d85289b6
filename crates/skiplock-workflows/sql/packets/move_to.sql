-- Move packet $1 to state $2 as actor $3 with note $4 (the trigger enforces the table).
SELECT skiplock._packet_move($1, $2, $3, $4)
