-- The process ids of the registered workers (a worker registers only once it is ready for
-- SIGTERM: src/worker/lifecycle.rs polls the shutdown signal before it registers).
SELECT pid FROM skiplock.workers
