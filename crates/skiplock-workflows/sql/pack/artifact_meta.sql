-- One key/value of the artifact's metadata (host, packed_at, …).
INSERT INTO meta (key, value) VALUES (?1, ?2)
