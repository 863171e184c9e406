//! From a host PID to the pod it runs in, through `/proc/<pid>/cgroup`.
//!
//! Kubelet names pod cgroups after the pod UID: `…/kubepods/burstable/pod<uid>/<container>` with
//! the cgroupfs driver, `…kubepods-burstable-pod<uid with _ for ->.slice/…` with systemd.

use std::path::Path;

/// The pod UID in one cgroup file's contents, if any line names a pod cgroup.
pub fn pod_uid_from_cgroup(contents: &str) -> Option<String> {
    for line in contents.lines() {
        let mut rest = line;
        while let Some(at) = rest.find("pod") {
            let after = &rest[at + 3..];
            let len = after
                .find(|c: char| !(c.is_ascii_hexdigit() || c == '-' || c == '_'))
                .unwrap_or(after.len());
            let candidate = after[..len].replace('_', "-");
            if is_uid(&candidate) {
                return Some(candidate.to_ascii_lowercase());
            }
            rest = after;
        }
    }
    None
}

/// A UID in its canonical 8-4-4-4-12 form.
fn is_uid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The pod UID of a host process, reading `<proc_root>/<pid>/cgroup`; `None` when the process
/// is gone or not in a pod.
pub fn pod_uid_of_pid(proc_root: &Path, pid: u32) -> Option<String> {
    let contents = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    pod_uid_from_cgroup(&contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0c6bbd8a-3c45-4d7e-9a53-1f2e3d4c5b6a";

    #[test]
    fn cgroupfs_v1_and_v2_paths() {
        let v1 = format!(
            "12:memory:/kubepods/burstable/pod{UID}/abcdef0123\n11:cpu:/kubepods/burstable/pod{UID}/abcdef0123\n"
        );
        assert_eq!(pod_uid_from_cgroup(&v1).as_deref(), Some(UID));
        let v2 = format!("0::/kubepods/pod{UID}/0123abcd\n");
        assert_eq!(pod_uid_from_cgroup(&v2).as_deref(), Some(UID));
    }

    #[test]
    fn systemd_slices_use_underscores() {
        let underscored = UID.replace('-', "_");
        let line = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{underscored}.slice/cri-containerd-1234.scope\n"
        );
        assert_eq!(pod_uid_from_cgroup(&line).as_deref(), Some(UID));
    }

    #[test]
    fn non_pod_processes_have_none() {
        assert_eq!(
            pod_uid_from_cgroup("0::/user.slice/user-1000.slice/session-2.scope\n"),
            None
        );
        assert_eq!(pod_uid_from_cgroup("0::/kubepods/podnotauid/x\n"), None);
        assert_eq!(pod_uid_from_cgroup(""), None);
    }

    #[test]
    fn reads_a_fake_proc_root() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(root.path().join("42")).expect("mkdir");
        std::fs::write(
            root.path().join("42/cgroup"),
            format!("0::/kubepods/pod{UID}/c\n"),
        )
        .expect("write");
        assert_eq!(pod_uid_of_pid(root.path(), 42).as_deref(), Some(UID));
        assert_eq!(pod_uid_of_pid(root.path(), 43), None);
    }
}
