-- Request a fetch of $1 (force $2, full $3); returns the fetch job's id.
SELECT skiplock.request_fetch($1, $2, $3)
