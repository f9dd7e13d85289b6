//! The pack artifact: one SQLite database per host with a `pages` table and an FTS5 index
//! (`pages_fts`) over title, headings and body. Built under a temporary name from rows
//! streamed out of Postgres, so a host of any size needs little memory; meant to run in a
//! blocking task.

use chrono::Utc;
use rusqlite::{Connection, params};
use tempfile::TempPath;
use tokio::sync::mpsc;

use crate::error::{Error, Result};
pub use crate::store::pack::PageRow;

const SCHEMA: &str = include_str!("../../sql/pack/artifact_schema.sql");
const INSERT: &str = include_str!("../../sql/pack/artifact_insert.sql");
const FINISH: &str = include_str!("../../sql/pack/artifact_finish.sql");
const META: &str = include_str!("../../sql/pack/artifact_meta.sql");

/// A finished artifact in a temporary file (deleted when dropped).
#[derive(Debug)]
pub struct Built {
    /// The temporary file.
    pub path: TempPath,
    /// Pages written.
    pub pages: u64,
    /// File size in bytes.
    pub bytes: u64,
}

fn sqlite(e: rusqlite::Error) -> Error {
    Error::Other(format!("building the SQLite artifact: {e}"))
}

/// Builds the artifact of `host` from the pages received on `rows` until the channel closes.
/// Blocking: call it from `spawn_blocking`.
pub fn build(host: &str, mut rows: mpsc::Receiver<PageRow>) -> Result<Built> {
    let file = tempfile::Builder::new()
        .prefix("skiplock-pack-")
        .suffix(".sqlite.tmp")
        .tempfile()?;
    let path = file.into_temp_path();
    let mut pages = 0u64;
    {
        let mut conn = Connection::open(&path).map_err(sqlite)?;
        conn.execute_batch(SCHEMA).map_err(sqlite)?;
        let tx = conn.transaction().map_err(sqlite)?;
        {
            let mut meta = tx.prepare(META).map_err(sqlite)?;
            meta.execute(params!["host", host]).map_err(sqlite)?;
            meta.execute(params!["built_at", Utc::now().to_rfc3339()])
                .map_err(sqlite)?;
            let mut ins = tx.prepare(INSERT).map_err(sqlite)?;
            while let Some(p) = rows.blocking_recv() {
                ins.execute(params![
                    p.url,
                    p.path,
                    p.title,
                    p.headings,
                    p.body,
                    p.last_fetched.map(|t| t.to_rfc3339())
                ])
                .map_err(sqlite)?;
                pages += 1;
            }
            meta.execute(params!["pages", pages.to_string()])
                .map_err(sqlite)?;
        }
        tx.execute_batch(FINISH).map_err(sqlite)?;
        tx.commit().map_err(sqlite)?;
        conn.close().map_err(|(_, e)| sqlite(e))?;
    }
    let bytes = std::fs::metadata(&path)?.len();
    Ok(Built { path, pages, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(url: &str, title: &str, body: &str) -> PageRow {
        PageRow {
            url: url.into(),
            path: url
                .rsplit_once('/')
                .map(|(_, p)| format!("/{p}"))
                .unwrap_or_default(),
            title: Some(title.into()),
            headings: Some("Intro".into()),
            body: Some(body.into()),
            last_fetched: Some(Utc::now()),
        }
    }

    #[test]
    fn the_artifact_has_pages_and_a_working_fts5_index() {
        let (tx, rx) = mpsc::channel(4);
        let h = std::thread::spawn(move || build("example.com", rx));
        tx.blocking_send(page(
            "http://example.com/a",
            "Apples",
            "red fruit grows on trees",
        ))
        .unwrap();
        tx.blocking_send(page(
            "http://example.com/b",
            "Bananas",
            "yellow fruit, curved",
        ))
        .unwrap();
        drop(tx);
        let built = h.join().unwrap().unwrap();
        assert_eq!(built.pages, 2);
        assert!(built.bytes > 0);
        let conn = Connection::open(&built.path).unwrap();
        let urls: Vec<String> = conn
            .prepare("SELECT url FROM pages_fts WHERE pages_fts MATCH 'curved' ORDER BY url")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(urls, vec!["http://example.com/b".to_string()]);
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM pages_fts WHERE pages_fts MATCH 'fruit'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 2);
        let host: String = conn
            .query_row("SELECT value FROM meta WHERE key = 'host'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(host, "example.com");
    }

    #[test]
    fn an_empty_host_gives_an_empty_but_valid_artifact() {
        let (tx, rx) = mpsc::channel(1);
        drop(tx);
        let built = build("empty.example", rx).unwrap();
        assert_eq!(built.pages, 0);
        let conn = Connection::open(&built.path).unwrap();
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM pages_fts WHERE pages_fts MATCH 'x'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 0);
    }
}
