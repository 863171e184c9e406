//! gpufair's policy: pure functions over plain data.
//!
//! No I/O, no async, no Kubernetes client: the webhook, the controller and the simulator all feed
//! these functions snapshots and apply what they return, so the policy is written once and tested
//! once.

pub mod duration;
pub mod labels;
pub mod mutation;
pub mod params;
pub mod units;
