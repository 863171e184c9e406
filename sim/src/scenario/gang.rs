//! Splitting a job's GPUs into pods.

/// Node-sized pods: a 32-GPU job on 8-GPU nodes is 4 pods of 8; 12 GPUs are 8 + 4.
pub fn node_sized_pods(gpus: u32, gpus_per_node: u32) -> Vec<u32> {
    let mut pods = vec![gpus_per_node; (gpus / gpus_per_node) as usize];
    let rest = gpus % gpus_per_node;
    if rest > 0 {
        pods.push(rest);
    }
    pods
}

/// `pods` equal pods, or `None` if the GPUs do not divide evenly.
pub fn equal_pods(gpus: u32, pods: u32) -> Option<Vec<u32>> {
    if pods == 0 || !gpus.is_multiple_of(pods) {
        None
    } else {
        Some(vec![gpus / pods; pods as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits() {
        assert_eq!(node_sized_pods(32, 8), vec![8, 8, 8, 8]);
        assert_eq!(node_sized_pods(12, 8), vec![8, 4]);
        assert_eq!(node_sized_pods(3, 8), vec![3]);
        assert_eq!(equal_pods(60, 15), Some(vec![4; 15]));
        assert_eq!(equal_pods(60, 7), None);
    }
}
