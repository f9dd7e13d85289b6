SELECT skiplock.set_key_limit($1, $2, $3, $4::float8 * interval '1 second')
