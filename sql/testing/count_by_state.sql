-- How many jobs of kinds $1 are in each state (skiplock::testing::drain).
SELECT j.state::text, count(*) FROM skiplock.jobs j WHERE j.kind = ANY($1::text[]) GROUP BY j.state
