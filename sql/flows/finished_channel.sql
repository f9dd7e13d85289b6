-- The channel a watched job's end is announced on (skiplock.finished_channel,
-- migrations/core/0010_flow_bounds.sql), read by a waiter before it LISTENs.
SELECT skiplock.finished_channel()
