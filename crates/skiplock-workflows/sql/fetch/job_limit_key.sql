-- Job $1's limit_key, and the host key its URL ($2) must have as limit_key
-- (skiplock._fetch_host_key; NULL: a URL the SQL API refuses).
SELECT j.limit_key, skiplock._fetch_host_key($2) AS expected
FROM skiplock.jobs j WHERE j.id = $1
