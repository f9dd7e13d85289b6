-- A flow in one call (skiplock.enqueue_flow): {"flow": id, "jobs": {name: id}}.
SELECT skiplock.enqueue_flow($1)
