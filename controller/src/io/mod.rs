//! The controller's I/O: the watches and caches that feed the model, the Lease, the calls that
//! apply what the model planned, and the cycle that drives them.

pub mod apply;
pub mod carry_out;
pub mod controller;
pub mod family_status;
pub mod kube_api;
pub mod leader;
pub mod pod_store;
pub mod queue_cache;
pub mod release;
pub mod watch;
