-- Write many outcomes in one statement (skiplock._ack, sql/api/14_ack.sql, says how): the
-- ids written come back; an id missing was no longer running that attempt (fenced off). Each
-- row also carries the finished jobs whose dependents may be left to settle (NULL: none).
SELECT id, unsettled FROM skiplock._ack($1::bigint[], $2::integer[], $3::text[]::skiplock.job_state[],
                                        $4::timestamptz[], $5::boolean[], $6::text[], $7::jsonb[],
                                        $8::timestamptz[])
