-- Keeps the scale run's ballast at its size: the $1 newest completed rows (the last drain's) go.
DELETE FROM skiplock.jobs
WHERE id IN (SELECT id FROM skiplock.jobs WHERE state = 'completed' ORDER BY id DESC LIMIT $1)
