-- The channel skiplock's wake-ups are sent on: 'skiplock_wake_' and a random UUID, readable by
-- the owner and the worker role only (sql/api/90_roles.sql). Postgres lets any login LISTEN on
-- any channel, so a fixed name told every login the queue names of every enqueue, pause and
-- retry (docs/security.md, "Wake-ups"). One row; `skiplock migrate` never changes it (a
-- migration runs once), a dump carries it, and the owner may rotate it with an UPDATE
-- (listeners take the new name when they reconnect).
CREATE TABLE skiplock.wake_channel (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    channel text NOT NULL CHECK (channel ~ '^skiplock_wake_[0-9a-f]{32}$')
);
INSERT INTO skiplock.wake_channel (channel)
VALUES ('skiplock_wake_' || replace(gen_random_uuid()::text, '-', ''));
