//! Does a pod ask for a GPU?

use super::policy::AdmissionPolicy;
use super::types::PodFacts;

/// The first GPU resource any container or init container requests or limits with a non-zero
/// quantity. Extended resources must have request == limit, but a pod may write only one of the
/// two, so both are read.
pub fn requested_gpu_resource<'a>(pod: &'a PodFacts, policy: &AdmissionPolicy) -> Option<&'a str> {
    pod.containers.iter().find_map(|c| {
        c.requests
            .iter()
            .chain(c.limits.iter())
            .find(|(name, quantity)| policy.is_gpu_resource(name) && !quantity_is_zero(quantity))
            .map(|(name, _)| name.as_str())
    })
}

/// Whether a Kubernetes quantity (`0`, `0.0`, `0m`, `0Ki`, `1`, `500m`…) is zero. Anything this
/// cannot read counts as non-zero: the API server has already validated the syntax, and treating
/// an odd spelling as "no GPU" would let a GPU pod bypass the gate.
pub fn quantity_is_zero(quantity: &str) -> bool {
    let trimmed = quantity.trim();
    let number_end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(number_end);
    // A decimal exponent (`1e3`) is a valid quantity suffix; its mantissa decides zero-ness.
    let suffix_ok = suffix.is_empty()
        || suffix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-');
    suffix_ok && number.parse::<f64>().is_ok_and(|n| n == 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_quantities() {
        for zero in ["0", "0.0", "0m", "0Ki", " 0 ", "+0", "0e3"] {
            assert!(quantity_is_zero(zero), "{zero}");
        }
        for non_zero in ["1", "500m", "0.5", "2Gi", "", "x", "1e-3"] {
            assert!(!quantity_is_zero(non_zero), "{non_zero}");
        }
    }
}
