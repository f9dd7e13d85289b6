-- The database's clock.
SELECT now()
