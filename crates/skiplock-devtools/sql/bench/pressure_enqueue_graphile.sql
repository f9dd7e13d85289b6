-- The pressure benchmark's producer for Graphile Worker: $1 no-op jobs in one add_jobs call,
-- each carrying the producer's clock $2 (ms since the epoch) for the harness's pickup latency.
SELECT count(*) FROM graphile_worker.add_jobs(
    ARRAY(SELECT ('noop', json_build_object('t', $2::float8), null, null, null, null, null, null)::graphile_worker.job_spec
          FROM generate_series(1, $1::int)))
