SELECT skiplock.resume_queue($1)
