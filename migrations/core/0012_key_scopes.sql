-- Key scopes (docs/security.md, "Tenants"): the keys `unique_by` derives and the `unique_for`
-- windows belong to the login that enqueues (its scope), so another enqueuer can neither find
-- them (an enqueue answering `deduplicated` told a caller that someone had a pending job with
-- those args) nor take them first (a window taken in another's kind and queue was theirs for
-- its whole length). A login's scope is its name, or the one the owner gave it here
-- (skiplock.set_key_scope): the logins of one service then share their keys and windows.
CREATE TABLE skiplock.key_scopes (
    login name PRIMARY KEY,
    scope text NOT NULL CHECK (scope <> '' AND length(scope) <= 200)
);

-- A window's scope ('': taken before scopes existed; such a window holds for every caller,
-- as it did, until it ends). The primary key decides a race within a scope only, so an open
-- transaction of one enqueuer never makes another's wait.
ALTER TABLE skiplock.unique_windows ADD COLUMN scope text NOT NULL DEFAULT '';
ALTER TABLE skiplock.unique_windows DROP CONSTRAINT unique_windows_pkey;
ALTER TABLE skiplock.unique_windows ADD PRIMARY KEY (kind, queue, scope, key, window_start);
