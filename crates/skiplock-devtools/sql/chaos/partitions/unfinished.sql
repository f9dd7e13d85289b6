-- Jobs of the run not finished yet (waiting or running).
SELECT count(*) FROM skiplock.jobs WHERE state NOT IN ('completed', 'discarded', 'cancelled')
