-- The limit_key of job $1 (the fetch handler checks it against the URL's host key).
SELECT limit_key FROM skiplock.jobs WHERE id = $1
