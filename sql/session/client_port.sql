-- The client end of this connection as the server sees it: the local port of the client's
-- TCP socket (NULL over a Unix socket). src/db/nodelay.rs finds the socket by it
-- (store::session::client_port).
SELECT inet_client_port(), inet_server_port()
