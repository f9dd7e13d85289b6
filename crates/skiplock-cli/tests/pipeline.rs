//! The whole pipeline under a graceful stop: a worker process crawling a site, packing it and
//! processing packets is stopped with SIGTERM mid-work; a restarted worker finishes
//! everything, with nothing lost and nothing left running.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::Html;
use support::*;

const PAGES: usize = 6;

#[derive(Default)]
struct Hits(AtomicUsize);

async fn index(State(h): State<Arc<Hits>>) -> Html<String> {
    h.0.fetch_add(1, Ordering::SeqCst);
    let links: String = (1..=PAGES)
        .map(|i| format!("<a href=\"/p/{i}\">page {i}</a> "))
        .collect();
    Html(format!(
        "<html><head><title>Index</title></head><body><h1>Pipeline</h1>{links}</body></html>"
    ))
}

async fn page(State(h): State<Arc<Hits>>, Path(i): Path<usize>) -> Html<String> {
    h.0.fetch_add(1, Ordering::SeqCst);
    Html(format!(
        "<html><head><title>Page {i}</title></head><body><h2>Section {i}</h2>\
         <p>word{i} lives on page {i}.</p><a href=\"/\">home</a></body></html>"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_crawl_pack_and_packets_then_a_restart_finishes_everything() {
    let db = TestDb::new().await;
    let hits = Arc::new(Hits::default());
    let app = Router::new()
        .route("/", axum::routing::get(index))
        .route("/p/{i}", axum::routing::get(page))
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let host = format!("127.0.0.1:{port}");

    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    // The processor waits until the test opens its gate: the first worker's packet is
    // certainly still processing when it is stopped.
    let gate = tmp.path().join("gate");
    let processor = tmp.path().join("gated-processor.sh");
    std::fs::write(
        &processor,
        format!(
            "#!/bin/sh\nwhile [ ! -e {} ]; do sleep 0.05; done\necho '{{\"frames\": 2}}'\n",
            gate.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&processor, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut packets = Vec::new();
    for p in 0..3 {
        let dir = tmp.path().join(format!("packet-{p}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("frame-1.tif"), b"frame").unwrap();
        let id: i64 = sqlx::query_scalar("SELECT skiplock.submit_packet($1, $2)")
            .bind(dir.to_str().unwrap())
            .bind(format!("packet {p}"))
            .fetch_one(&db.pool)
            .await
            .unwrap();
        packets.push(id);
    }
    sqlx::query("SELECT skiplock.request_fetch($1, force => true, full => true)")
        .bind(format!("http://{host}/"))
        .execute(&db.pool)
        .await
        .unwrap();

    let store_s = store.to_str().unwrap().to_string();
    let processor_s = processor.to_str().unwrap().to_string();
    let envs = [
        ("SKIPLOCK_FETCH_ALLOW_PRIVATE", "true"),
        ("SKIPLOCK_POLITENESS", "300ms"),
        ("SKIPLOCK_PACK_QUIET", "1s"),
        ("SKIPLOCK_STORE", store_s.as_str()),
        ("SKIPLOCK_PACKET_PROCESSOR", processor_s.as_str()),
        ("SKIPLOCK_SHUTDOWN_GRACE", "200ms"),
        ("SKIPLOCK_POLL_INTERVAL", "200ms"),
    ];

    // First worker: stop it while pages are being fetched and a packet is processing.
    let mut first = spawn_worker_process(&db.url, &[], &envs);
    wait_for(
        "a page fetched and a packet processing",
        Duration::from_secs(90),
        || async {
            let fetched = count(
                &db.pool,
                "SELECT count(*) FROM skiplock.pages WHERE last_fetched IS NOT NULL",
            )
            .await;
            let processing = count(
                &db.pool,
                "SELECT count(*) FROM skiplock.packets WHERE state = 'processing'",
            )
            .await;
            (fetched >= 1 && processing >= 1).then_some(())
        },
    )
    .await;
    sigterm(&first);
    assert_eq!(
        first.wait().unwrap().code(),
        Some(0),
        "a graceful stop exits 0"
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE state = 'running'"
        )
        .await,
        0,
        "nothing is left running after a graceful stop"
    );
    let unfinished = count(
        &db.pool,
        "SELECT count(*) FROM skiplock.pages WHERE last_fetched IS NULL",
    )
    .await
        + count(
            &db.pool,
            "SELECT count(*) FROM skiplock.packets WHERE state <> 'ready_for_review'",
        )
        .await;
    assert!(unfinished > 0, "the stop really interrupted work");

    // Second worker: everything finishes.
    std::fs::write(&gate, "").unwrap();
    let mut second = spawn_worker_process(&db.url, &[], &envs);
    let expected_pages = (PAGES + 1) as i64;
    let h = host.clone();
    wait_for(
        "crawl, pack and packets finished",
        Duration::from_secs(120),
        || {
            let h = h.clone();
            let db = &db;
            async move {
                let fetched = count(
                    &db.pool,
                    "SELECT count(*) FROM skiplock.pages WHERE last_fetched IS NOT NULL",
                )
                .await;
                let ready = count(
                    &db.pool,
                    "SELECT count(*) FROM skiplock.packets WHERE state = 'ready_for_review'",
                )
                .await;
                let packed: Option<i64> =
                    sqlx::query_scalar("SELECT pages FROM skiplock.packs WHERE host = $1")
                        .bind(&h)
                        .fetch_optional(&db.pool)
                        .await
                        .unwrap();
                let open = count(
                    &db.pool,
                    "SELECT count(*) FROM skiplock.jobs WHERE state IN ('available', 'running')",
                )
                .await;
                (fetched == expected_pages
                    && ready == 3
                    && packed == Some(expected_pages)
                    && open == 0)
                    .then_some(())
            }
        },
    )
    .await;
    sigterm(&second);
    assert_eq!(second.wait().unwrap().code(), Some(0));

    // Nothing failed for good, every page was requested at least once and at most twice
    // (a fetch cut short by the stop may run again: at-least-once).
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM skiplock.jobs WHERE state IN ('discarded', 'cancelled')"
        )
        .await,
        0
    );
    let n = hits.0.load(Ordering::SeqCst);
    assert!((PAGES + 1..=2 * (PAGES + 1)).contains(&n), "{n} requests");
    let artifact = store.join(format!("packs/{host}.sqlite"));
    let conn = rusqlite::Connection::open(&artifact).unwrap();
    let url: String = conn
        .query_row(
            "SELECT url FROM pages_fts WHERE pages_fts MATCH 'word4'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(url.ends_with("/p/4"), "{url}");
    for id in packets {
        let history: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM skiplock.packet_events WHERE packet_id = $1 AND to_state = 'ready_for_review'",
        )
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(history, 1, "packet {id} reached review once");
    }
}
