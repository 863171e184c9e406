//! gpufair's gate-release controller.
//!
//! The webhook gates every GPU pod; this controller lifts the gates in the order gpufair's
//! policy decides, keeps each queue's usage ledger in `Queue.status`, and preempts through the
//! Eviction API when the policy asks. It runs inside `gpufair-webhook serve` (gpufair-runtime,
//! which also feeds its Queue cache) on the replica that holds the Lease. Four parts:
//! - [`snapshot`]: cached objects → core's `Snapshot` (pure);
//! - [`plan`] and [`apply`]: decisions → exact requests, then sending them;
//! - [`ledger`]: the ledgers, rebuilt from and written to Queue status;
//! - [`leader`]: leader election on a Lease.

pub mod apply;
pub mod budgets;
pub mod controller;
pub mod eligibility;
pub mod facts;
pub mod families;
pub mod family_status;
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
#[cfg(any(test, feature = "test-support"))]
pub mod fuzz_entry;
pub mod grouped;
pub mod leader;
pub mod ledger;
pub mod metrics;
pub mod options;
pub mod plan;
pub mod pod_ref;
pub mod pod_store;
pub mod pool_name;
pub mod pools;
pub mod prefetch;
pub mod queue_cache;
pub mod release;
pub mod requests;
pub mod snapshot;
pub mod token_bucket;
pub mod trim;
pub mod waiting_status;
pub mod watch;

pub use controller::{ControllerConfig, run};
pub use leader::{Leadership, LeaseConfig, LeaseTiming, LeaseTimingError, run_elector};
pub use metrics::ControllerMetrics;
pub use options::SharedOptions;
pub use queue_cache::{QueueCache, QueueFeed, queue_cache};
pub use token_bucket::ReleaseLimit;

#[cfg(test)]
mod tests;
