-- Fill the full-text index from `pages` in one pass, then merge its segments.
INSERT INTO pages_fts (pages_fts) VALUES ('rebuild');
INSERT INTO pages_fts (pages_fts) VALUES ('optimize');
