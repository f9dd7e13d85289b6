SELECT skiplock.pause_queue($1)
