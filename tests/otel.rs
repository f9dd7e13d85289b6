//! Trace propagation (feature `otel`, src/otel.rs) against a real Postgres, with spans kept
//! in memory: a job enqueued inside a span carries its W3C context in meta; the worker's span
//! of the first attempt is that span's child, a retry's span links to it; each job span has
//! the job's id, kind, queue and attempt as attributes.

mod support;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use skiplock::queue::NewJob;
use skiplock::store::jobs::{self, enqueue};
use skiplock::worker::handler::Handler;
use skiplock::worker::{HandlerResult, JobContext, JobError, Outcome};
use support::*;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// The process's one subscriber: an OpenTelemetry layer exporting to memory.
fn telemetry() -> &'static (InMemorySpanExporter, SdkTracerProvider) {
    static T: OnceLock<(InMemorySpanExporter, SdkTracerProvider)> = OnceLock::new();
    T.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("skiplock-tests"));
        let subscriber = tracing_subscriber::registry()
            .with(layer)
            .with(tracing_subscriber::filter::LevelFilter::INFO);
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
        (exporter, provider)
    })
}

/// Fails its first attempt, completes the second.
#[derive(Clone, Default)]
struct FailsOnce(Arc<Mutex<Vec<i32>>>);
impl Handler for FailsOnce {
    type Args = serde_json::Value;
    fn kind(&self) -> &'static str {
        "traced"
    }
    async fn run(&self, ctx: JobContext, _args: serde_json::Value) -> HandlerResult {
        self.0.lock().unwrap().push(ctx.attempt);
        if ctx.attempt == 1 {
            return Err(JobError::retry("first time fails"));
        }
        Ok(Outcome::Complete)
    }
}

/// The spans of job `id` of `queue` (the tests run side by side in one process, each with a
/// database of its own whose ids start at 1: the queue tells them apart).
fn spans_of(spans: &[SpanData], queue: &str, id: i64) -> Vec<SpanData> {
    spans
        .iter()
        .filter(|s| {
            attr(s, "job.id") == Some(id.to_string())
                && attr(s, "job.queue").as_deref() == Some(queue)
        })
        .cloned()
        .collect()
}

fn attr(s: &SpanData, key: &str) -> Option<String> {
    s.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_span_is_the_child_of_the_enqueuers_span_and_a_retry_links_to_it() {
    let (exporter, provider) = telemetry();
    let db = TestDb::new().await;
    let request = tracing::info_span!("handle-signup");
    let (trace_id, span_id): (TraceId, SpanId) = {
        let cx = request.context();
        let sc = cx.span().span_context().clone();
        (sc.trace_id(), sc.span_id())
    };
    assert_ne!(trace_id, TraceId::INVALID);
    let id = async {
        enqueue(
            &db.pool,
            &NewJob::new("traced", json!({}))
                .queue("signup")
                .meta(json!({"tenant": "acme"})),
        )
        .await
        .unwrap()
        .id
    }
    .instrument(request.clone())
    .await;
    drop(request);

    // The context is in meta, beside the caller's own keys.
    let row = jobs::get_job(&db.pool, id).await.unwrap();
    assert_eq!(row.meta["tenant"], "acme");
    let tp = row.meta["traceparent"].as_str().unwrap().to_string();
    assert_eq!(tp, format!("00-{trace_id}-{span_id}-01"));

    let h = FailsOnce::default();
    let w = start_worker(&db.pool, fast_settings(), |b| {
        b.queue("signup", 2).register(h.clone())
    });
    wait_for("the job completed", Duration::from_secs(60), || async {
        (state_of(&db, id).await == "completed").then_some(())
    })
    .await;
    w.stop().await.unwrap();
    assert_eq!(*h.0.lock().unwrap(), [1, 2]);
    provider.force_flush().unwrap();

    let spans = spans_of(&exporter.get_finished_spans().unwrap(), "signup", id);
    let attempt = |n: i32| {
        spans
            .iter()
            .find(|s| attr(s, "job.attempt") == Some(n.to_string()))
            .unwrap_or_else(|| panic!("no span of attempt {n}: {spans:?}"))
    };
    let first = attempt(1);
    assert_eq!(first.name, "job traced");
    assert_eq!(first.span_context.trace_id(), trace_id, "same trace");
    assert_eq!(
        first.parent_span_id, span_id,
        "child of the enqueuer's span"
    );
    assert_eq!(attr(first, "job.kind").as_deref(), Some("traced"));
    assert_eq!(attr(first, "job.queue").as_deref(), Some("signup"));
    let second = attempt(2);
    assert_ne!(
        second.parent_span_id, span_id,
        "a retry is not the enqueuer's child"
    );
    let linked: Vec<(TraceId, SpanId)> = second
        .links
        .links
        .iter()
        .map(|l| (l.span_context.trace_id(), l.span_context.span_id()))
        .collect();
    assert_eq!(
        linked,
        [(trace_id, span_id)],
        "a retry links to the enqueuer's span"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueued_outside_any_trace_carries_none_and_a_callers_own_context_is_kept() {
    let (exporter, provider) = telemetry();
    let db = TestDb::new().await;
    let plain = enqueue(
        &db.pool,
        &NewJob::new("traced", json!({})).queue("elsewhere"),
    )
    .await
    .unwrap()
    .id;
    assert_eq!(
        jobs::get_job(&db.pool, plain).await.unwrap().meta,
        json!({})
    );
    let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let kept = async {
        enqueue(
            &db.pool,
            &NewJob::new("traced", json!({}))
                .queue("elsewhere")
                .meta(json!({"traceparent": own})),
        )
        .await
        .unwrap()
        .id
    }
    .instrument(tracing::info_span!("another-request"))
    .await;
    assert_eq!(
        jobs::get_job(&db.pool, kept).await.unwrap().meta["traceparent"],
        own
    );
    // The worker makes the job's span a child of the caller's context (an upstream service's).
    let h = FailsOnce::default();
    sqlx::query("UPDATE skiplock.jobs SET attempt = 1 WHERE id = $1")
        .bind(kept)
        .execute(&db.pool)
        .await
        .unwrap();
    let w = start_worker(&db.pool, fast_settings(), |b| {
        b.queue("elsewhere", 2).register(h.clone())
    });
    wait_for("both completed", Duration::from_secs(60), || async {
        (count_state(&db.pool, "completed").await == 2).then_some(())
    })
    .await;
    w.stop().await.unwrap();
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let of = |id: i64| spans_of(&spans, "elsewhere", id);
    // The job enqueued outside a trace: its spans have no parent and no link.
    assert!(!of(plain).is_empty());
    assert!(
        of(plain)
            .iter()
            .all(|s| s.parent_span_id == SpanId::INVALID && s.links.links.is_empty())
    );
    // `kept` was set to attempt 1 before the worker took it: it ran as attempt 2, linked.
    let k = of(kept);
    assert_eq!(k.len(), 1);
    assert_eq!(
        k[0].links.links[0].span_context.trace_id().to_string(),
        "0af7651916cd43dd8448eb211c80319c"
    );
}
