-- Keep the scale run's ballast at its size: the newest $1 completed jobs go.
DELETE FROM skiplock.jobs WHERE id IN (SELECT id FROM skiplock.jobs WHERE state = 'completed' ORDER BY id DESC LIMIT $1)
