-- fetch SQL API: request a polite fetch of a page from any language, plus the internal
-- functions the `fetch` handler uses for full crawls (politeness is a per-host rate limit).
-- Installed (CREATE OR REPLACE) by `skiplock migrate`.

-- The names this workflow's own functions enqueue under, reserved from the generic enqueue
-- (skiplock.reserved_names; sql/api/80_reserved.sql builds the checks): a fetch job:
-- `fetch:<url>` keys, kind and queue `fetch` (skiplock.request_fetch writes them with the
-- URL's host as the limit key, so a generic enqueue could skip the per-host politeness).
INSERT INTO skiplock.reserved_names (part, what, name, use_instead) VALUES
    ('fetch', 'kind', 'fetch', 'skiplock.request_fetch'),
    ('fetch', 'queue', 'fetch', 'skiplock.request_fetch'),
    ('fetch', 'key_prefix', 'fetch:', 'skiplock.request_fetch')
ON CONFLICT (what, name) DO UPDATE SET part = EXCLUDED.part, use_instead = EXCLUDED.use_instead;

-- Normalises an http(s) URL the way the handler does for ordinary URLs: lower-case scheme
-- and host, default port dropped, empty path -> '/', `.` and `..` segments resolved
-- (RFC 3986 5.2.4), fragment dropped. Refuses anything
-- that is not an absolute http/https URL with a host, with a message naming the problem.
CREATE OR REPLACE FUNCTION skiplock._normalize_url(url text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    m text[];
    hp text[];
    scheme text;
    host text;
    port text;
    path text;
    segs text[];
    kept text[] := ARRAY[]::text[];
    seg text;
BEGIN
    IF url IS NULL OR btrim(url) = '' THEN
        RAISE EXCEPTION 'skiplock: invalid URL: it is empty' USING ERRCODE = '22023';
    END IF;
    IF btrim(url) ~ '\s' THEN
        RAISE EXCEPTION 'skiplock: invalid URL "%": it contains whitespace', url USING ERRCODE = '22023';
    END IF;
    m := regexp_match(btrim(url), '^([A-Za-z][A-Za-z0-9+.-]*):(//)?([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$');
    IF m IS NULL THEN
        RAISE EXCEPTION 'skiplock: invalid URL "%": expected an absolute http:// or https:// URL', url
            USING ERRCODE = '22023';
    END IF;
    scheme := lower(m[1]);
    IF scheme NOT IN ('http', 'https') THEN
        RAISE EXCEPTION 'skiplock: invalid URL "%": only http and https URLs can be fetched, not %:', url, scheme
            USING ERRCODE = '22023';
    END IF;
    IF m[2] IS NULL OR m[3] = '' THEN
        RAISE EXCEPTION 'skiplock: invalid URL "%": it has no host', url USING ERRCODE = '22023';
    END IF;
    IF position('@' IN m[3]) > 0 THEN
        RAISE EXCEPTION 'skiplock: invalid URL "%": user names and passwords are not allowed', url
            USING ERRCODE = '22023';
    END IF;
    hp := regexp_match(m[3], '^(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+)(:[0-9]*)?$');
    IF hp IS NULL THEN
        RAISE EXCEPTION 'skiplock: invalid URL "%": bad host or port "%"', url, m[3] USING ERRCODE = '22023';
    END IF;
    host := lower(hp[1]);
    IF length(host) > 253 THEN
        RAISE EXCEPTION 'skiplock: invalid URL: its host is % characters long (at most 253)', length(host)
            USING ERRCODE = '22023';
    END IF;
    -- A URL is a key of btree indexes (crawl_pages' primary key, pages, the job's unique_key):
    -- past about 2.7 KB an index row no longer fits and the insert fails with an obscure
    -- error. skiplock::workflows::fetch::normalize::MAX_URL_BYTES is the same cap (the link
    -- extractor skips a longer link).
    IF octet_length(url) > 2000 THEN
        RAISE EXCEPTION 'skiplock: invalid URL: it is % bytes long (at most 2000)', octet_length(url)
            USING ERRCODE = '22023';
    END IF;
    port := nullif(ltrim(hp[2], ':'), '');
    IF port IS NOT NULL THEN
        IF length(port) > 5 OR port::integer > 65535 THEN
            RAISE EXCEPTION 'skiplock: invalid URL "%": port % is out of range', url, port USING ERRCODE = '22023';
        END IF;
        port := port::integer::text;
        IF (scheme = 'http' AND port = '80') OR (scheme = 'https' AND port = '443') THEN
            port := NULL;
        END IF;
    END IF;
    path := CASE WHEN m[4] = '' THEN '/' ELSE m[4] END;
    IF path ~ '(^|/)\.\.?(/|$)' THEN
        segs := string_to_array(substr(path, 2), '/');
        FOR i IN 1 .. array_length(segs, 1) LOOP
            seg := segs[i];
            IF seg = '..' THEN
                kept := kept[1:greatest(coalesce(array_length(kept, 1), 0) - 1, 0)];
            ELSIF seg <> '.' THEN
                kept := kept || seg;
            END IF;
            -- A final `.` or `..` leaves a directory: keep its trailing slash.
            IF i = array_length(segs, 1) AND seg IN ('.', '..') THEN
                kept := kept || ''::text;
            END IF;
        END LOOP;
        path := '/' || array_to_string(kept, '/');
    END IF;
    RETURN scheme || '://' || host || coalesce(':' || port, '') || path || coalesce(m[5], '');
END;
$$;

-- The host key of a normalised URL (skiplock._normalize_url): its host, plus ":port" when
-- it names a non-default one; the same as the worker's `normalize::host_key`. Fetch jobs
-- carry it as limit_key, so the fetch queue's per-key rate limit is politeness per host.
CREATE OR REPLACE FUNCTION skiplock._url_host_key(normalized text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT substring(_url_host_key.normalized FROM '^[a-z]+://([^/?#]*)');
$$;

-- Enqueues a fetch of `url` (already valid) or merges into the pending one: one pending
-- fetch job per URL. A merge keeps the stronger request: force stays once asked for, and a
-- job that belongs to no crawl joins this one.
CREATE OR REPLACE FUNCTION skiplock._request_fetch(url text, force boolean, crawl_id bigint, hops integer DEFAULT 0)
RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    u text := skiplock._normalize_url(_request_fetch.url);
    key text;
    a jsonb;
    jid bigint;
BEGIN
    key := 'fetch:' || u;
    a := jsonb_build_object('url', u, 'force', coalesce(_request_fetch.force, false),
                            'full', _request_fetch.crawl_id IS NOT NULL);
    IF _request_fetch.crawl_id IS NOT NULL THEN
        a := a || jsonb_build_object('crawl', _request_fetch.crawl_id);
    END IF;
    IF coalesce(_request_fetch.hops, 0) > 0 THEN
        a := a || jsonb_build_object('hops', _request_fetch.hops);
    END IF;
    LOOP
        UPDATE skiplock.jobs j
        SET limit_key = skiplock._url_host_key(u),
            args = j.args
                   || jsonb_build_object('force', coalesce((j.args->>'force')::boolean, false) OR (a->>'force')::boolean)
                   || CASE WHEN j.args ? 'crawl' OR NOT a ? 'crawl' THEN '{}'::jsonb
                           ELSE jsonb_build_object('crawl', a->'crawl', 'full', true) END
        WHERE j.unique_key = key AND j.state = 'available' AND j.kind = 'fetch' AND j.queue = 'fetch'
        RETURNING j.id INTO jid;
        IF jid IS NOT NULL THEN
            RETURN jid;
        END IF;
        INSERT INTO skiplock.jobs (kind, args, queue, scheduled_at, unique_key, limit_key)
        VALUES ('fetch', a, 'fetch', now(), key, skiplock._url_host_key(u))
        ON CONFLICT (kind, queue, unique_key) WHERE state = 'available' AND unique_key IS NOT NULL
        DO NOTHING
        RETURNING id INTO jid;
        IF jid IS NOT NULL THEN
            RETURN jid;
        END IF;
        -- The pending job was claimed between the two statements: try again. (Keys are
        -- namespaced by kind and queue, migrations/history/0013_enqueue_namespaces.sql: no job of
        -- another kind or queue can hold this one.)
    END LOOP;
END;
$$;

-- Requests a polite fetch of `url`; returns the fetch job's id. The worker fetches it only
-- if it is due (or `force`); `full` walks every same-host page it links to, each once.
-- A URL that already has a pending fetch job gets no second one.
CREATE OR REPLACE FUNCTION skiplock.request_fetch(url text, force boolean DEFAULT false, full boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql 
-- Runs with the owner's rights so that the skiplock_enqueuer role needs no table privileges.
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    u text := skiplock._normalize_url(request_fetch.url);
    cid bigint;
BEGIN
    IF coalesce(request_fetch.full, false) THEN
        INSERT INTO skiplock.crawls (root_url, force) VALUES (u, coalesce(request_fetch.force, false))
        RETURNING id INTO cid;
        INSERT INTO skiplock.crawl_pages (crawl_id, url) VALUES (cid, u);
    END IF;
    RETURN skiplock._request_fetch(u, request_fetch.force, cid);
END;
$$;

-- Requests the pages of crawl `crawl_id` that it has not requested yet; returns how many.
CREATE OR REPLACE FUNCTION skiplock._crawl_request(crawl_id bigint, urls text[], force boolean)
RETURNS integer
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    u text;
    n integer := 0;
BEGIN
    -- A URL over the cap (skiplock._normalize_url) is skipped, not an error: one overlong link
    -- must not fail the fetch of the page that has it (the worker skips them first).
    FOR u IN
        INSERT INTO skiplock.crawl_pages (crawl_id, url)
        SELECT _crawl_request.crawl_id, t.u FROM unnest(_crawl_request.urls) AS t(u)
        WHERE octet_length(t.u) <= 2000
        ON CONFLICT DO NOTHING
        RETURNING url
    LOOP
        PERFORM skiplock._request_fetch(u, _crawl_request.force, _crawl_request.crawl_id);
        n := n + 1;
    END LOOP;
    RETURN n;
END;
$$;

-- The per-host politeness slot and lease of release 0.1 are gone: politeness is the fetch
-- queue's per-key rate limit (skiplock.set_key_limit, set by workers at start from
-- SKIPLOCK_POLITENESS), enforced when a job is claimed (sql/api/15_control.sql).
DROP FUNCTION IF EXISTS skiplock._fetch_slot(bigint, text, interval, interval);
DROP FUNCTION IF EXISTS skiplock._fetch_release(text, interval);

-- Sets the fetch queue's politeness (what SKIPLOCK_POLITENESS asks a worker for, set by its
-- start hook): per host key one fetch at a time and one start per `period`, the same limits
-- skiplock.set_key_limit('fetch', 1, 1, period) writes. The worker role has no write
-- privilege on skiplock.queues and may not call set_key_limit (sql/api/90_roles.sql): the
-- fetch queue's row is the owner's, so a worker login can neither delete the politeness
-- nor loosen it to "no limit"; it can only set a politeness, which is its configuration's
-- job. Clearing it (politeness 0s) is the owner's: `skiplock queue limit fetch`.
CREATE OR REPLACE FUNCTION skiplock.set_politeness(period interval)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF set_politeness.period IS NULL OR set_politeness.period <= interval '0'
       OR set_politeness.period > interval '1 day' THEN
        RAISE EXCEPTION 'skiplock: politeness must be more than 0s and at most 1 day, got % (to clear it, the owner runs skiplock queue limit fetch)',
            coalesce(set_politeness.period::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    PERFORM skiplock.set_key_limit('fetch', 1, 1, set_politeness.period);
END;
$$;

-- The host key (the politeness limit_key) skiplock._request_fetch gives a fetch of `url`, or
-- NULL for a URL it refuses: what the fetch handler checks a job's limit_key against
-- (src/workflows/fetch/mod.rs, `misplaced`). The SQL's spelling is the one the limit counts
-- (the url crate spells a few hosts differently, e.g. IPv4-mapped IPv6 literals).
CREATE OR REPLACE FUNCTION skiplock._fetch_host_key(url text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN skiplock._url_host_key(skiplock._normalize_url(url));
EXCEPTION WHEN invalid_parameter_value THEN
    RETURN NULL;
END;
$$;
