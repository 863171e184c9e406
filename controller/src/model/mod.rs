//! The controller's model: everything between the caches and the requests that involves no
//! I/O (no `.await`). Cached objects become core's snapshot, core's decisions become exact
//! requests, and the ledgers and the waiting view are kept here.

pub mod budgets;
pub mod eligibility;
pub mod facts;
pub mod families;
pub mod grouped;
pub mod leader_model;
pub mod ledger;
pub mod options;
pub mod plan;
pub mod pod_ref;
pub mod pool_name;
pub mod pools;
pub mod prefetch;
pub mod queue_figures;
pub mod requests;
pub mod snapshot;
pub mod step;
pub mod token_bucket;
pub mod trim;
pub mod waiting_status;
pub mod workload_name;
