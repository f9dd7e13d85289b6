SELECT skiplock.set_queue_limit($1, $2)
