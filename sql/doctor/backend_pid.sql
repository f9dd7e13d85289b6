-- The server process answering this client connection. Two client connections open at once
-- answered by the same process share a server connection: a pooler in transaction (or
-- statement) mode is between them and the server (`store::doctor::shared_backend`).
SELECT pg_backend_pid()
