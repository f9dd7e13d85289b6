-- Fair mode of queue $1 on ($2 true) or off (skiplock.set_queue_fairness).
SELECT skiplock.set_queue_fairness($1, $2)
