//! How Events and the waiting view name a pending workload that a reason mentions: core's
//! reasons refer to it by its index in the cycle's snapshot, which means nothing to a user.

use crate::snapshot::Built;

/// "pod NAMESPACE/NAME" for a workload of one pod, "pod group NAMESPACE/GROUP" for a gang,
/// "workload #W" where the cycle knows no such workload.
pub fn workload_name(built: &Built, w: usize) -> String {
    let (Some(workload), Some(pods)) = (built.snapshot.pending.get(w), built.pending.get(w)) else {
        return format!("workload #{w}");
    };
    match pods {
        [only] if *only.pod().uid == *workload.uid => {
            format!("pod {}/{}", only.pod().namespace, only.pod().name)
        }
        [first, ..] => {
            let group = workload
                .uid
                .split_once('/')
                .map_or(workload.uid.as_str(), |(_, group)| group);
            format!("pod group {}/{group}", first.pod().namespace)
        }
        [] => format!("workload {}", workload.uid),
    }
}
