-- Job $1's politeness slot on host $2 (interval $3 s, lease $4 s): NULL = go, else seconds to wait.
SELECT extract(epoch FROM skiplock._fetch_slot($1, $2, make_interval(secs => $3), make_interval(secs => $4)))::float8
