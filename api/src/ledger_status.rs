//! The ledger as stored in `Queue.status.ledger`, so it survives controller restarts.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One bucket of history: GPU-seconds in that bucket, each decayed to the bucket's end.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerBucketStatus {
    /// Bucket start, seconds since the Unix epoch.
    pub start: f64,
    pub charged: f64,
    pub entitled: f64,
    pub utilized: f64,
    pub capacity: f64,
}

/// A queue's ledger.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerStatus {
    /// Bucket length, seconds.
    pub bucket_seconds: f64,
    /// Time of the last sample folded in, seconds since the Unix epoch.
    pub last_sample: f64,
    pub buckets: Vec<LedgerBucketStatus>,
}
