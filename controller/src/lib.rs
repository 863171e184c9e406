//! gpufair's gate-release controller.
//!
//! The webhook gates every GPU pod; this controller lifts the gates in the order gpufair's
//! policy decides, keeps each queue's usage ledger in `Queue.status`, and preempts through the
//! Eviction API when the policy asks. It runs inside `gpufair-webhook serve` (gpufair-runtime,
//! which also feeds its Queue cache) on the replica that holds the Lease. Two halves:
//! - [`model`], no I/O: cached objects → core's `Snapshot` ([`snapshot`]), decisions → exact
//!   requests ([`plan`]), the ledgers ([`ledger`]) and the waiting view;
//! - [`io`]: the watches and caches, leader election on a Lease ([`leader`]), the calls that
//!   apply the plan ([`apply`]), and the cycle that drives it all ([`controller`]).

pub mod io;
pub mod metrics;
pub mod model;

// Each module keeps its path at the crate's root (`gpufair_controller::snapshot`, ...): the
// folders say which side of the I/O line a module is on; callers need not care.
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
#[cfg(any(test, feature = "test-support"))]
pub mod fuzz_entry;
pub use io::{
    apply, carry_out, controller, family_status, kube_api, leader, pod_store, queue_cache, release,
    watch,
};
pub use model::{
    budgets, eligibility, facts, families, grouped, leader_model, ledger, options, plan, pod_ref,
    pool_name, pools, prefetch, queue_figures, requests, snapshot, step, token_bucket, trim,
    waiting_status, workload_name,
};

pub use controller::{ControllerConfig, run};
pub use leader::{Leadership, LeaseConfig, LeaseTiming, LeaseTimingError, run_elector};
pub use metrics::ControllerMetrics;
pub use options::SharedOptions;
pub use queue_cache::{QueueCache, QueueFeed, queue_cache};
pub use token_bucket::ReleaseLimit;

#[cfg(test)]
mod tests;
