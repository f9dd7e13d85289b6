-- Host $1's content changed: enqueue a timer-reset job; returns its id.
SELECT skiplock.timer_reset($1)
