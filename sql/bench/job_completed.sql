-- Whether job $1 has completed (the release ceiling starts once its first job has).
SELECT coalesce((SELECT state = 'completed' FROM skiplock.jobs WHERE id = $1), false)
