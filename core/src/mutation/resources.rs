//! Does a pod ask for a GPU?

use super::policy::AdmissionPolicy;
use super::types::PodFacts;
use crate::quantity::is_zero;

/// The first GPU resource any container or init container requests or limits with a non-zero
/// quantity. Extended resources must have request == limit, but a pod may write only one of the
/// two, so both are read.
pub fn requested_gpu_resource<'a>(pod: &'a PodFacts, policy: &AdmissionPolicy) -> Option<&'a str> {
    pod.containers.iter().find_map(|c| {
        c.requests
            .iter()
            .chain(c.limits.iter())
            .find(|(name, quantity)| policy.is_gpu_resource(name) && !is_zero(quantity))
            .map(|(name, _)| name.as_str())
    })
}
