//! The pure parts of the apalis backend: how apalis arguments become a skiplock `args`
//! object and back, and how an apalis task (with its optional [`JobOptions`]) becomes a
//! [`NewJob`].

use chrono::{TimeZone, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use skiplock::error::{Error, Result};
use skiplock::queue::{NewJob, OnConflict, RawArgs};

/// The key under which arguments that are not a JSON object are stored (skiplock's `args`
/// must be an object): `42` is stored as `{"value": 42}`.
pub const WRAP_KEY: &str = "value";

/// `args` as a skiplock `args` object: an object as it is, anything else wrapped in
/// `{"value": …}`.
pub fn encode_args<A: Serialize>(args: &A) -> Result<Value> {
    let v = serde_json::to_value(args).map_err(|e| {
        Error::Invalid(format!(
            "apalis task arguments do not serialize to JSON: {e}"
        ))
    })?;
    Ok(match v {
        Value::Object(_) => v,
        other => {
            let mut m = Map::new();
            m.insert(WRAP_KEY.into(), other);
            Value::Object(m)
        }
    })
}

/// Reads a claimed job's args as stored: parsed here, one job at a time, so args serde_json
/// cannot read (too deep, a number outside `f64`: src/queue/args.rs) discard this job alone
/// with the error, as any other undecodable args do.
pub fn decode_raw_args<A: DeserializeOwned>(a: &RawArgs) -> std::result::Result<A, String> {
    let v = a
        .to_value()
        .map_err(|e| format!("undecodable args for this apalis handler: {e}"))?;
    decode_args(&v)
}

/// Reads arguments stored by [`encode_args`] (or written by hand): the object itself first,
/// then, for an object holding only `value`, what it wraps. The error names what failed.
pub fn decode_args<A: DeserializeOwned>(v: &Value) -> std::result::Result<A, String> {
    match serde_json::from_value::<A>(v.clone()) {
        Ok(a) => Ok(a),
        Err(direct) => match v.as_object() {
            Some(m) if m.len() == 1 && m.contains_key(WRAP_KEY) => {
                serde_json::from_value::<A>(m[WRAP_KEY].clone())
                    .map_err(|e| format!("undecodable args for this apalis handler: {e}"))
            }
            _ => Err(format!(
                "undecodable args for this apalis handler: {direct}"
            )),
        },
    }
}

/// skiplock options for a job pushed through apalis are the typed-enqueue options
/// ([`skiplock::queue::JobOptions`]): attach one to a task
/// (`TaskBuilder::new(args).data(JobOptions::new().queue("slow")).build()`) or pass it to
/// [`super::SkiplockStorage::enqueue`]. Unset fields fall back to the apalis task's own
/// (`run_at`, `priority`, `max_attempts`, `idempotency_key` as a keep-key), then to the
/// storage's queue and skiplock's defaults.
pub use skiplock::queue::JobOptions;

/// What an apalis task carries besides its arguments, read from apalis's `Task` (kept apart
/// so the conversion is a plain function).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskFields {
    /// apalis `run_at` (UNIX seconds).
    pub run_at: Option<u64>,
    /// apalis priority (larger first).
    pub priority: Option<usize>,
    /// apalis attempt limit.
    pub max_attempts: Option<usize>,
    /// apalis idempotency key.
    pub idempotency_key: Option<String>,
}

/// apalis priority (larger first, unsigned) as skiplock's (smaller first, smallint).
pub fn skiplock_priority(apalis: usize) -> i16 {
    -(apalis.min(i16::MAX as usize) as i16)
}

/// The skiplock job for arguments `args` (already encoded) pushed to `kind` in
/// `default_queue`, with the task's `fields` and the optional `opts` (which win).
pub fn new_job(
    kind: &str,
    default_queue: &str,
    args: Value,
    fields: &TaskFields,
    opts: Option<&JobOptions>,
) -> Result<NewJob> {
    let o = opts.cloned().unwrap_or_default();
    let mut job =
        NewJob::new(kind, args).queue(o.queue.unwrap_or_else(|| default_queue.to_string()));
    let run_at =
        match (o.run_at, fields.run_at) {
            (Some(t), _) => Some(t),
            (None, Some(secs)) => {
                let secs = i64::try_from(secs)
                    .map_err(|_| Error::Invalid(format!("apalis run_at {secs} is out of range")))?;
                Some(Utc.timestamp_opt(secs, 0).single().ok_or_else(|| {
                    Error::Invalid(format!("apalis run_at {secs} is out of range"))
                })?)
            }
            (None, None) => None,
        };
    if let Some(t) = run_at {
        job = job.run_at(t);
    }
    if let Some(p) = o.priority.or(fields.priority.map(skiplock_priority)) {
        job = job.priority(p);
    }
    let max = match (o.max_attempts, fields.max_attempts) {
        (Some(n), _) => Some(n),
        (None, Some(n)) => Some(
            i32::try_from(n)
                .map_err(|_| Error::Invalid(format!("apalis max_attempts {n} is out of range")))?,
        ),
        (None, None) => None,
    };
    if let Some(n) = max {
        job = job.max_attempts(n);
    }
    match (o.unique_key, &fields.idempotency_key) {
        (Some((k, c)), _) => job = job.unique_key(k, c),
        (None, Some(k)) => job = job.unique_key(k.clone(), OnConflict::Keep),
        (None, None) => {}
    }
    if let Some(k) = o.limit_key {
        job = job.limit_key(k);
    }
    Ok(job)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Email {
        to: String,
    }

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct HasValue {
        value: u32,
    }

    #[test]
    fn objects_are_stored_as_they_are_and_other_values_wrapped() {
        assert_eq!(
            encode_args(&Email { to: "a@b".into() }).unwrap(),
            json!({"to": "a@b"})
        );
        assert_eq!(encode_args(&42u32).unwrap(), json!({"value": 42}));
        assert_eq!(encode_args(&"x").unwrap(), json!({"value": "x"}));
        assert_eq!(encode_args(&(1, 2)).unwrap(), json!({"value": [1, 2]}));
        assert_eq!(encode_args(&()).unwrap(), json!({"value": null}));
    }

    #[test]
    fn decoding_round_trips_and_a_struct_with_a_value_field_is_not_unwrapped() {
        let e = Email { to: "a@b".into() };
        assert_eq!(decode_args::<Email>(&encode_args(&e).unwrap()).unwrap(), e);
        assert_eq!(
            decode_args::<u32>(&encode_args(&42u32).unwrap()).unwrap(),
            42
        );
        let h = HasValue { value: 7 };
        assert_eq!(
            decode_args::<HasValue>(&encode_args(&h).unwrap()).unwrap(),
            h
        );
        assert_eq!(decode_args::<()>(&encode_args(&()).unwrap()).unwrap(), ());
    }

    #[test]
    fn args_serde_json_cannot_read_name_the_problem() {
        let deep = RawArgs::new(format!("{}1{}", "[".repeat(300), "]".repeat(300)));
        let e = decode_raw_args::<Value>(&deep).unwrap_err();
        assert!(
            e.contains("undecodable args") && e.contains("recursion limit"),
            "{e}"
        );
        let e = decode_raw_args::<Value>(&RawArgs::new(r#"{"x": 1e400}"#)).unwrap_err();
        assert!(e.contains("number out of range"), "{e}");
        let ok = RawArgs::new(r#"{"value": 42}"#);
        assert_eq!(decode_raw_args::<u32>(&ok).unwrap(), 42);
    }

    #[test]
    fn undecodable_args_name_the_problem() {
        let e = decode_args::<Email>(&json!({"from": "x"})).unwrap_err();
        assert!(e.contains("undecodable args") && e.contains("to"), "{e}");
        let e = decode_args::<u32>(&json!({"value": "x"})).unwrap_err();
        assert!(e.contains("undecodable args"), "{e}");
    }

    #[test]
    fn apalis_priority_maps_to_smaller_first() {
        assert_eq!(skiplock_priority(0), 0);
        assert_eq!(skiplock_priority(5), -5);
        assert_eq!(skiplock_priority(usize::MAX), -i16::MAX);
    }

    #[test]
    fn a_task_becomes_a_job_options_winning_over_task_fields() {
        let fields = TaskFields {
            run_at: Some(1_900_000_000),
            priority: Some(3),
            max_attempts: Some(4),
            idempotency_key: Some("idem".into()),
        };
        let j = new_job("k", "default", json!({}), &fields, None).unwrap();
        assert_eq!(j.queue, "default");
        assert_eq!(j.run_at, Utc.timestamp_opt(1_900_000_000, 0).single());
        assert_eq!((j.priority, j.max_attempts), (-3, 4));
        assert_eq!(
            (j.unique_key.as_deref(), j.on_conflict),
            (Some("idem"), OnConflict::Keep)
        );

        let at = Utc.timestamp_opt(2_000_000_000, 0).unwrap();
        let o = JobOptions::new()
            .queue("slow")
            .run_at(at)
            .priority(-1)
            .max_attempts(2)
            .unique_key("k1", OnConflict::Replace);
        let j = new_job("k", "default", json!({}), &fields, Some(&o)).unwrap();
        assert_eq!(j.queue, "slow");
        assert_eq!(j.run_at, Some(at));
        assert_eq!((j.priority, j.max_attempts), (-1, 2));
        assert_eq!(
            (j.unique_key.as_deref(), j.on_conflict),
            (Some("k1"), OnConflict::Replace)
        );

        let j = new_job("k", "q", json!({}), &TaskFields::default(), None).unwrap();
        assert_eq!(
            (j.queue.as_str(), j.run_at, j.priority, j.max_attempts),
            ("q", None, 0, 25)
        );
        assert_eq!(j.unique_key, None);
    }

    #[test]
    fn out_of_range_task_fields_are_refused_not_wrapped() {
        let f = TaskFields {
            run_at: Some(u64::MAX),
            ..Default::default()
        };
        assert!(
            new_job("k", "q", json!({}), &f, None)
                .unwrap_err()
                .to_string()
                .contains("run_at")
        );
        let f = TaskFields {
            max_attempts: Some(usize::MAX),
            ..Default::default()
        };
        assert!(
            new_job("k", "q", json!({}), &f, None)
                .unwrap_err()
                .to_string()
                .contains("max_attempts")
        );
    }
}
