//! The HTTP/1 server the console and a worker's metrics endpoint share ([`server`]: hyper
//! connections with a header-read timeout) and the `Host` names each answers for
//! ([`hosts`], against DNS rebinding). Below both: the console ([`crate::web`]) and the
//! exporter ([`crate::metrics`]) use it, it uses neither.

pub mod hosts;
pub mod server;
