-- Cancels the unfinished jobs with a unique key (of a kind, in a queue; NULL: any): how many.
SELECT skiplock.cancel_by_key($1, $2, $3)
