-- The channel wake-ups are sent on (skiplock._wake_channel, migrations/0015_wake_channel.sql).
SELECT skiplock._wake_channel()
