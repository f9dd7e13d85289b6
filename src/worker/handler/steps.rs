//! Durable steps (docs/steps.md): [`JobContext::step`], the cursor, durable sleeps and waits
//! for signals. Each record is its own short statement, fenced by the attempt as the ack is
//! (`sql/api/16_steps.sql`); a later attempt of the job reads them back once, at its first
//! step, and replays what was recorded instead of running it again.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::JobContext;
use crate::worker::outcome::JobError;
use crate::error::{Error, Result};
use crate::store::steps::{self, NewStep, StepRecord};

/// The most steps (sleeps and waits included) one job records; `skiplock._max_steps()` in
/// sql/api/16_steps.sql is the same bound.
pub const MAX_STEPS: usize = 1000;
/// The most bytes of one step's result or of the cursor, as JSON text;
/// `skiplock._max_step_bytes()` is the same bound.
pub const MAX_STEP_BYTES: usize = 65536;

const STEP: &str = "step";
const CURSOR: &str = "cursor";
const SLEEP: &str = "sleep";
const WAIT: &str = "wait";

/// A signal a job received (docs/steps.md, "Signals").
#[derive(Debug, Clone, PartialEq)]
pub struct Signal<T> {
    /// Its payload (`null` when it was sent without one).
    pub payload: T,
    /// The key scope of the login that sent it (docs/security.md, "Tenants").
    pub scope: String,
    /// When it was sent.
    pub sent_at: DateTime<Utc>,
}

/// The steps state of one attempt, shared by the clones of its [`JobContext`].
#[derive(Debug, Default)]
pub(crate) struct Steps {
    /// Recording and reading, one at a time (a job's records are numbered in order).
    inner: tokio::sync::Mutex<Inner>,
    /// Set once the attempt ended itself (a sleep, a wait): the job is due again then.
    suspended: Mutex<Option<DateTime<Utc>>>,
    /// The signal the attempt ended waiting for, if it did (src/worker/acks.rs makes the
    /// job due after the ack if the signal came meanwhile).
    waiting_for: Mutex<Option<String>>,
    /// The error of the step that failed, if one did: the attempt's verdict when the handler
    /// returns an error (so a step's discard discards the job).
    failed: Mutex<Option<JobError>>,
}

/// A record's kind and name.
type Key = (String, String);

#[derive(Debug, Default)]
struct Inner {
    /// What earlier attempts (and this one) recorded, by (kind, name): (seq, result).
    recorded: Option<HashMap<Key, (i32, Option<Value>)>>,
    /// The highest seq recorded before this attempt began.
    last_before: i32,
    /// The highest seq this attempt replayed or recorded.
    reached: i32,
    /// The steps this attempt already ran or replayed, by (kind, name).
    used: HashSet<Key>,
    /// Sleeps this attempt reached, for their names.
    sleeps: u32,
}

impl Steps {
    pub(crate) fn suspended(&self) -> Option<DateTime<Utc>> {
        *self.suspended.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub(crate) fn waiting_for(&self) -> Option<String> {
        self.waiting_for
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    pub(crate) fn failed(&self) -> Option<JobError> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    fn suspend(&self, until: DateTime<Utc>) -> Error {
        let mut s = self.suspended.lock().unwrap_or_else(|p| p.into_inner());
        let until = *s.get_or_insert(until);
        Error::Suspended { until }
    }
    fn fail(&self, e: JobError) {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    }
}

impl JobContext {
    async fn steps_loaded(&self) -> Result<tokio::sync::MutexGuard<'_, Inner>> {
        if let Some(until) = self.steps.suspended() {
            return Err(Error::Suspended { until });
        }
        let mut inner = self.steps.inner.lock().await;
        if inner.recorded.is_none() {
            let rows = steps::load(&self.pool, self.id).await?;
            inner.last_before = rows.iter().map(|r| r.seq).max().unwrap_or(0);
            inner.recorded = Some(
                rows.into_iter()
                    .map(|r: StepRecord| {
                        let v = r.result.and_then(|j| j.into_readable().ok());
                        ((r.kind, r.name), (r.seq, v))
                    })
                    .collect(),
            );
        }
        Ok(inner)
    }

    /// Records `value` under (kind, name) for this attempt; a fenced-off attempt (rescued or
    /// cancelled meanwhile) records nothing and gets an error.
    async fn record(
        &self,
        inner: &mut Inner,
        kind: &str,
        name: &str,
        value: Value,
        note: Option<&str>,
    ) -> Result<i32> {
        let len = value.to_string().len();
        if len > MAX_STEP_BYTES {
            let e = format!(
                "the result of {kind} {name:?} is {len} bytes (at most {MAX_STEP_BYTES}): not recorded"
            );
            self.steps.fail(JobError::discard(e.clone()));
            return Err(Error::Invalid(e));
        }
        let seq = steps::record(
            &self.pool,
            NewStep {
                job: self.id,
                attempt: self.attempt,
                worker: &self.worker_id,
                kind,
                name,
                result: &value,
                note,
            },
        )
        .await;
        let seq = match seq {
            Ok(Some(seq)) => seq,
            Ok(None) => {
                return Err(Error::Other(format!(
                    "{kind} {name:?} not recorded: attempt {} of job {} was taken away (rescued or cancelled)",
                    self.attempt, self.id
                )));
            }
            Err(e @ Error::Refused { .. }) => {
                // A bound (sql/api/16_steps.sql): retrying would hit it again.
                self.steps.fail(JobError::discard(e.to_string()));
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        if let Some(r) = inner.recorded.as_mut() {
            r.insert((kind.into(), name.into()), (seq, Some(value)));
        }
        if kind != CURSOR {
            inner.reached = inner.reached.max(seq);
        }
        Ok(seq)
    }

    /// Runs `f` once per job and records its result (docs/steps.md): on any later attempt of
    /// this job (a retry, a rescue, a restart after a kill) it returns the recorded result
    /// without running `f`. The result is written as soon as `f` succeeds, in its own short
    /// statement fenced by the attempt (a taken-away attempt records nothing). A failing `f`
    /// fails the attempt as the handler's own error would: the handler returns it with `?`.
    /// Names are unique within a job (`format!("item-{i}")` in a loop); at most
    /// [`MAX_STEPS`] steps per job, each result at most [`MAX_STEP_BYTES`] bytes of JSON.
    pub async fn step<T, F, Fut, E>(&self, name: impl Into<String>, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: Into<JobError>,
    {
        let name = name.into();
        let key = (STEP.to_string(), name.clone());
        let note = {
            let mut inner = self.steps_loaded().await?;
            if !inner.used.insert(key.clone()) {
                let e = format!(
                    "step {name:?} ran twice in one attempt: step names are unique within a job"
                );
                self.steps.fail(JobError::discard(e.clone()));
                return Err(Error::Invalid(e));
            }
            let found = inner.recorded.as_ref().and_then(|r| r.get(&key)).cloned();
            if let Some((seq, v)) = found {
                if seq < inner.reached {
                    tracing::warn!(job.id = self.id, step = %name, "step replayed out of the order it was recorded in");
                }
                inner.reached = inner.reached.max(seq);
                return T::deserialize(v.unwrap_or(Value::Null)).map_err(|e| {
                    Error::Invalid(format!(
                        "the recorded result of step {name:?} does not read as this step's type: {e}"
                    ))
                });
            }
            // A new step while steps an earlier attempt recorded after the last one replayed
            // are still ahead: the handler's steps changed (docs/steps.md).
            (inner.reached < inner.last_before).then(|| {
                format!(
                    "recorded by attempt {} before steps {}..={} of earlier attempts were replayed: the handler's steps changed",
                    self.attempt,
                    inner.reached + 1,
                    inner.last_before
                )
            })
        };
        // Not holding the lock: `f` may run steps of its own.
        let v = match f().await {
            Ok(v) => v,
            Err(e) => {
                let e: JobError = e.into();
                let message = e.message.clone();
                self.steps.fail(e);
                return Err(Error::Step { name, message });
            }
        };
        let value = serde_json::to_value(&v)
            .map_err(|e| Error::Invalid(format!("the result of step {name:?} is not JSON: {e}")))?;
        let mut inner = self.steps.inner.lock().await;
        if let Some(n) = &note {
            tracing::warn!(job.id = self.id, step = %name, note = %n, "new step recorded");
        }
        self.record(&mut inner, STEP, &name, value, note.as_deref())
            .await?;
        Ok(v)
    }

    /// Saves the job's cursor (docs/steps.md, "Cursor"): one short statement, fenced like a
    /// step; a later attempt reads it back with [`JobContext::cursor`]. Each checkpoint
    /// replaces the last.
    pub async fn checkpoint<T: Serialize>(&self, value: &T) -> Result<()> {
        let value = serde_json::to_value(value)
            .map_err(|e| Error::Invalid(format!("the cursor is not JSON: {e}")))?;
        let mut inner = self.steps_loaded().await?;
        self.record(&mut inner, CURSOR, "", value, None).await?;
        Ok(())
    }

    /// The job's cursor as the last checkpoint (of this attempt or an earlier one) left it;
    /// `None` before the first.
    pub async fn cursor<T: DeserializeOwned>(&self) -> Result<Option<T>> {
        let inner = self.steps_loaded().await?;
        let key = (CURSOR.to_string(), String::new());
        match inner.recorded.as_ref().and_then(|r| r.get(&key)) {
            None | Some((_, None)) => Ok(None),
            Some((_, Some(v))) => T::deserialize(v).map(Some).map_err(|e| {
                Error::Invalid(format!("the job's cursor does not read as this type: {e}"))
            }),
        }
    }

    /// A durable sleep (docs/steps.md, "Sleeping"): the first time the handler reaches it,
    /// the wake time is recorded and this returns [`Error::Suspended`]: the handler returns
    /// (with `?`), the attempt ends without being used up, no slot or connection is held, and
    /// the job is due again at `until`. The attempt that runs then replays the steps before
    /// it and passes the sleep (its recorded time, not a new `until`) at once.
    pub async fn sleep_until(&self, until: DateTime<Utc>) -> Result<()> {
        let mut inner = self.steps_loaded().await?;
        inner.sleeps += 1;
        let name = format!("sleep-{}", inner.sleeps);
        let key = (SLEEP.to_string(), name.clone());
        inner.used.insert(key.clone());
        let found = inner.recorded.as_ref().and_then(|r| r.get(&key)).cloned();
        let wake = match found {
            Some((seq, v)) => {
                inner.reached = inner.reached.max(seq);
                v.as_ref()
                    .and_then(|v| v.get("until"))
                    .and_then(|u| serde_json::from_value::<DateTime<Utc>>(u.clone()).ok())
                    .unwrap_or(until)
            }
            None => {
                let until = crate::time::clamp(until);
                self.record(
                    &mut inner,
                    SLEEP,
                    &name,
                    serde_json::json!({ "until": until }),
                    None,
                )
                .await?;
                until
            }
        };
        // Due at or after the wake time (the claim's clock is the database's: a worker whose
        // clock lags does not sleep again).
        if self.scheduled_at >= wake || Utc::now() >= wake {
            return Ok(());
        }
        Err(self.steps.suspend(wake))
    }

    /// [`JobContext::sleep_until`] `d` from now (the first time: the wake time is recorded).
    pub async fn sleep(&self, d: std::time::Duration) -> Result<()> {
        let d = chrono::Duration::from_std(d).unwrap_or(chrono::Duration::days(36500));
        let until = Utc::now()
            .checked_add_signed(d)
            .unwrap_or_else(crate::time::latest);
        self.sleep_until(until).await
    }

    /// Waits for signal `name` (docs/steps.md, "Signals"), from any sender:
    /// [`JobContext::wait_for_from`] without a restriction.
    pub async fn wait_for<T: DeserializeOwned>(
        &self,
        name: &str,
        timeout: std::time::Duration,
    ) -> Result<Option<Signal<T>>> {
        self.wait_for_from(name, None, timeout).await
    }

    /// Waits for signal `name` sent by one of the key scopes `from` (`None`: any), for at most
    /// `timeout` from the first time the job waits for it. A signal already sent is returned
    /// at once; otherwise the attempt ends as [`JobContext::sleep_until`] ends it (the handler
    /// returns the [`Error::Suspended`] with `?`) and the job is due again when the signal comes
    /// (`skiplock.signal`, [`signal`]) or the wait times out: then this returns the signal, or
    /// `None` for a timeout. What the wait got is recorded: a later attempt gets the same.
    pub async fn wait_for_from<T: DeserializeOwned>(
        &self,
        name: &str,
        from: Option<&[String]>,
        timeout: std::time::Duration,
    ) -> Result<Option<Signal<T>>> {
        let mut inner = self.steps_loaded().await?;
        let key = (WAIT.to_string(), name.to_string());
        inner.used.insert(key.clone());
        // A wait an earlier attempt recorded counts as replayed (for the notes of new steps).
        if let Some(seq) = inner
            .recorded
            .as_ref()
            .and_then(|r| r.get(&key))
            .map(|r| r.0)
        {
            inner.reached = inner.reached.max(seq);
        }
        let a = steps::wait(
            &self.pool,
            steps::NewWait {
                job: self.id,
                attempt: self.attempt,
                worker: &self.worker_id,
                name,
                timeout_secs: timeout.as_secs_f64(),
                scopes: from,
            },
        )
        .await;
        let a = match a {
            Err(e @ Error::Refused { .. }) => {
                self.steps.fail(JobError::discard(e.to_string()));
                return Err(e);
            }
            a => a?,
        };
        match a.outcome.as_str() {
            "signal" => {
                let payload = a
                    .payload
                    .map(|p| p.into_readable().map_err(|u| u.error))
                    .transpose()
                    .map_err(|e| Error::Invalid(format!("signal {name:?} is not readable: {e}")))?
                    .unwrap_or(Value::Null);
                let payload = T::deserialize(payload).map_err(|e| {
                    Error::Invalid(format!("signal {name:?} does not read as this type: {e}"))
                })?;
                Ok(Some(Signal {
                    payload,
                    scope: a.scope.unwrap_or_default(),
                    sent_at: a.sent_at.unwrap_or_default(),
                }))
            }
            "timed_out" => Ok(None),
            "waiting" => {
                *self
                    .steps
                    .waiting_for
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(name.to_string());
                Err(self
                    .steps
                    .suspend(a.until.unwrap_or_else(crate::time::latest)))
            }
            _ => Err(Error::Other(format!(
                "wait {name:?} not recorded: attempt {} of job {} was taken away (rescued or cancelled)",
                self.attempt, self.id
            ))),
        }
    }
}
