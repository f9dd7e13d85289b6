-- A scrape's statements run under this statement_timeout (milliseconds, as text), set for
-- the scrape's transaction only: a slow count is cut off instead of holding the scrape.
SELECT set_config('statement_timeout', $1, true)
