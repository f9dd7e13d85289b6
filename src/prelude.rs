//! Everything a program that enqueues and runs jobs usually needs, in one import:
//! `use skiplock::prelude::*;`. (Serde's derive macros come along, for args types.)

pub use crate::client::{enqueue, enqueue_with};
pub use crate::config::QueueSettings;
pub use crate::error::{Error, Result};
pub use crate::maintenance::MaintenanceSettings;
pub use crate::queue::flow::{BatchSummary, Flow};
pub use crate::queue::{JobArgs, JobOptions, NewJob, OnConflict, OnDependencyFailure, UniqueBy};
pub use crate::store::Pool;
pub use crate::worker::{Handler, HandlerResult, JobContext, JobError, Outcome, Worker};
pub use serde::{Deserialize, Serialize};
