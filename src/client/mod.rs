//! What a service that enqueues calls, above the store: enqueue a typed job or a flow
//! ([`enqueue`]), wait for a job to finish ([`wait`]), send a job a signal ([`signal`]), and wait for room in a queue with a
//! limit on waiting jobs ([`admission`]). The job model these take and return is
//! [`crate::queue`], below the store, so the store's statements and these share one model
//! and the model calls nothing (docs/layout.md, "Layers").

pub mod admission;
pub mod enqueue;
pub mod signal;
pub mod wait;

pub use enqueue::{enqueue, enqueue_flow, enqueue_job, enqueue_many, enqueue_with};
pub use signal::signal;
pub use wait::{Waited, wait_for};
