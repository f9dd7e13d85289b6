-- A console session's first statement (src/db/console.rs): a statement and lock timeout
-- (milliseconds; zero for none), plans made with the values of each call (the job list's
-- optional filters keep their indexes) and no JIT (short pages). Set here, not in the
-- start-up packet's `options`, which connection poolers such as PgBouncer refuse.
SELECT set_config('statement_timeout', $1::text, false),
       set_config('lock_timeout', $2::text, false),
       set_config('plan_cache_mode', 'force_custom_plan', false),
       set_config('jit', 'off', false)
