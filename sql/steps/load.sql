-- What job $1 recorded (docs/steps.md): every step, sleep, wait and its cursor, in order.
SELECT seq, kind, name, attempt, result, note, recorded_at
FROM skiplock.job_steps
WHERE job_id = $1
ORDER BY seq
