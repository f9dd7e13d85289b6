-- Worker processes registered (the pressure benchmark waits for its worker).
SELECT count(*) FROM skiplock.workers
