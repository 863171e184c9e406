//! Request vectors read the same way everywhere: padded or cut to the snapshot's resources,
//! sized in GPU-equivalents, and laid out pod after pod.

/// Request vectors padded or cut to the snapshot's resource count, so a short or long vector is
/// read the same way everywhere.
pub(super) fn normalise(requests: &[u32], width: usize) -> Vec<u32> {
    let mut v = requests.to_vec();
    v.resize(width, 0);
    v
}

/// GPU-equivalents of `requests` padded or cut to `weights.len()` resources: the same products,
/// summed in the same order, as the size of [`normalise`]'s copy, without making the copy.
pub(super) fn padded_size(requests: &[u32], weights: &[f64]) -> f64 {
    requests
        .iter()
        .copied()
        .chain(std::iter::repeat(0))
        .zip(weights)
        .map(|(c, w)| f64::from(c) * w)
        .sum()
}

/// The request vector of pod `p` in `pod_requests` (`width` counts each).
pub(super) fn pod_request(pod_requests: &[u32], width: usize, p: usize) -> &[u32] {
    &pod_requests[p * width..(p + 1) * width]
}
