-- SQLite schema of a pack artifact: the pages, and an FTS5 index over title, headings and
-- body that reads its text from `pages` (external content), so
--   SELECT url FROM pages_fts WHERE pages_fts MATCH 'word'
-- finds pages without storing the text twice.
PRAGMA journal_mode = OFF;
PRAGMA synchronous = OFF;
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT
);
CREATE TABLE pages (
    id           INTEGER PRIMARY KEY,
    url          TEXT NOT NULL UNIQUE,
    path         TEXT NOT NULL,
    title        TEXT,
    headings     TEXT,
    body         TEXT,
    last_fetched TEXT
);
CREATE VIRTUAL TABLE pages_fts USING fts5(
    url UNINDEXED, title, headings, body,
    content = 'pages', content_rowid = 'id'
);
