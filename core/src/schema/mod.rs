//! The `fairshare`, `preemption` and `releaseScore` blocks as people write them: in the gpufair
//! config file (`gpufair_api::Config`) and in the simulator's scenario files, which take the same
//! blocks.
//!
//! One schema for both: the keys (camelCase, unknown keys refused by serde), their defaults
//! (core's [`crate::params`] defaults, so they are written once), their accepted ranges, and the
//! conversion into core's parameters. Durations are read by [`crate::duration`]. Parsing the
//! text into these types is the caller's (serde, from YAML); nothing here reads a file.

mod error;
mod fairshare;
mod pools;
mod preemption;
mod release_score;
mod resolve;

pub use error::SchemaError;
pub use fairshare::{ChargeBasisConfig, DeficitConfig, FairShareConfig};
pub use pools::{POOL_NAME_FORMS, PoolFairShareConfig};
pub use preemption::PreemptionConfig;
pub use release_score::ReleaseScoreConfig;
