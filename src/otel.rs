//! Trace context carried from the code that enqueues a job to the handler that runs it
//! (feature `otel`; docs/rust-guide.md, "Traces"). At enqueue, the current `tracing` span's
//! OpenTelemetry context is written into the job's meta as W3C `traceparent` / `tracestate`
//! (a caller's own values are kept). When the worker starts the job, its span is made a
//! child of that context on the first attempt and linked to it on a retry (a retry is a
//! trace of its own, started later, which points back at the enqueue). The spans go through
//! `tracing` and `tracing-opentelemetry`, so the application keeps its subscriber and exporter;
//! without an OpenTelemetry layer nothing is captured and nothing is linked.

use std::borrow::Cow;
use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::{Map, Value};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The meta keys the context is kept under (the W3C header names).
pub const TRACE_KEYS: [&str; 2] = ["traceparent", "tracestate"];

/// `meta` with the current span's trace context added, when there is one and `meta` holds no
/// `traceparent` of its own; otherwise `meta` as it is.
pub(crate) fn with_current_context(meta: Option<&Value>) -> Option<Cow<'_, Value>> {
    if meta.is_some_and(|m| m.get(TRACE_KEYS[0]).is_some()) {
        return meta.map(Cow::Borrowed);
    }
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return meta.map(Cow::Borrowed);
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    let mut out = match meta {
        Some(Value::Object(m)) => m.clone(),
        // Not an object: left for the database to refuse with its message.
        Some(other) => return Some(Cow::Borrowed(other)),
        None => Map::new(),
    };
    for key in TRACE_KEYS {
        if let Some(v) = carrier.remove(key).filter(|v| !v.is_empty()) {
            out.insert(key.to_string(), Value::String(v));
        }
    }
    Some(Cow::Owned(Value::Object(out)))
}

/// Makes `span` (a job's, not yet entered) a child of the trace context in the job's `meta`
/// on attempt 1, and links it to that context on a later attempt. A meta without a valid
/// context changes nothing.
pub(crate) fn follow_enqueuer(span: &tracing::Span, meta: &Value, attempt: i32) {
    let carrier: HashMap<String, String> = TRACE_KEYS
        .iter()
        .filter_map(|k| Some((k.to_string(), meta.get(*k)?.as_str()?.to_string())))
        .collect();
    if carrier.is_empty() {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    let remote = cx.span().span_context().clone();
    if !remote.is_valid() {
        return;
    }
    if attempt <= 1 {
        // Fails only without an OpenTelemetry layer (nothing to do then).
        let _ = span.set_parent(cx);
    } else {
        span.add_link(remote);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_current_trace_meta_is_left_as_it_is() {
        let meta = serde_json::json!({"tenant": "a"});
        assert_eq!(
            with_current_context(Some(&meta)).as_deref(),
            Some(&meta),
            "no OpenTelemetry layer: no context"
        );
        assert_eq!(with_current_context(None), None);
        // A caller's own traceparent is never replaced.
        let own = serde_json::json!({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"});
        assert!(matches!(
            with_current_context(Some(&own)),
            Some(Cow::Borrowed(_))
        ));
    }
}
