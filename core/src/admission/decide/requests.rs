//! Request vectors read the same way everywhere: padded or cut to the snapshot's resources,
//! sized in GPU-equivalents, and laid out pod after pod.

/// Request vectors padded or cut to the snapshot's resource count, so a short or long vector is
/// read the same way everywhere.
pub(super) fn normalise(requests: &[u32], width: usize) -> Vec<u32> {
    // Allocated once at its final size: a copy padded afterwards was allocated twice whenever
    // the request named fewer resources than the snapshot has, as most do.
    let mut v = Vec::with_capacity(width);
    v.extend(requests.iter().take(width));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_pads_short_requests_and_cuts_long_ones_to_the_width() {
        assert_eq!(normalise(&[2], 3), vec![2, 0, 0]);
        assert_eq!(normalise(&[2, 1, 4], 2), vec![2, 1]);
        assert_eq!(normalise(&[2, 1], 2), vec![2, 1]);
        assert_eq!(normalise(&[], 1), vec![0]);
        assert_eq!(normalise(&[2], 3).capacity(), 3);
    }

    #[test]
    fn padded_size_weighs_what_normalise_keeps() {
        let weights = [1.0, 0.25];
        for requests in [&[3][..], &[3, 2], &[3, 2, 9]] {
            let copy = normalise(requests, weights.len());
            let size: f64 = copy
                .iter()
                .zip(&weights)
                .map(|(c, w)| f64::from(*c) * w)
                .sum();
            assert_eq!(padded_size(requests, &weights).to_bits(), size.to_bits());
        }
    }
}
