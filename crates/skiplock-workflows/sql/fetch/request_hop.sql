-- Request a fetch of redirect target $1 (force $2), $3 redirects from the original request.
SELECT skiplock._request_fetch($1, $2, NULL, $3)
