-- The process id of the server process serving this connection: the benchmark finds the
-- server's other processes (its parent, the postmaster, and the postmaster's children)
-- from it in /proc, when the server runs on the benchmark's machine.
SELECT pg_backend_pid()
