//! Right-sizing GPU memory from history.
//!
//! Pods of one workload family (same owner kind and name prefix, or the same
//! `gpufair.io/family` label) tend to need the same GPU memory. The controller folds each pod's
//! peak into the family's exponentially smoothed peak ([`history`]); at admission a pod that opts
//! in and asks for one whole GPU is moved to the smallest MIG profile or shared slice its node
//! pool offers that holds the prediction plus headroom ([`decide`]). Everything here is pure.

mod decide;
mod family;
mod history;
mod slices;

pub use decide::{
    FamilyLookup, RIGHT_SIZE_RESULT_ANNOTATION, RightSize, RightSizeDecline, RightSizeRewrite,
    right_size,
};
pub use family::{
    FAMILY_FORMS, FAMILY_LABEL, OwnerFacts, RIGHT_SIZE_FORMS, RIGHT_SIZE_LABEL, family_of,
    name_prefix, parse_opt_in,
};
pub use history::{DEFAULT_ALPHA, FamilyHistory, HistoryError, check_alpha};
pub use slices::{
    DEFAULT_HEADROOM_PERCENT, PoolSlices, RightSizePolicy, SliceOffer, choose_slice, needed_bytes,
    pool_slices,
};
