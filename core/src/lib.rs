//! gpufair's policy: pure functions over plain data.
//!
//! No I/O, no async, no Kubernetes client: the webhook, the controller and the simulator all feed
//! these functions snapshots and apply what they return, so the policy is written once and tested
//! once.

pub mod admission;
pub mod division;
pub mod duration;
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
#[cfg(any(test, feature = "test-support"))]
pub mod fuzz_entry;
pub mod index;
pub mod labels;
pub mod ledger;
pub mod mig_profile;
pub mod mutation;
pub mod params;
pub mod quantity;
pub mod rightsize;
pub mod schema;
pub mod snapshot;
pub mod time_text;
pub mod units;
pub mod weight;
