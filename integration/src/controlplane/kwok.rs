//! kwok in place of the nodes' kubelets: it marks the Nodes the harness creates Ready and keeps
//! their Leases, and moves each pod bound to one of them through its life with the stage files
//! kwok's module ships (pod ready, delete) plus one of ours: a pod annotated with
//! [`RUN_FOR`] succeeds that long after it started, as a job would. Other pods run until
//! deleted.

use std::path::Path;

use super::ControlPlaneError;
use super::binaries::Binaries;
use super::process::Process;

/// The annotation kwok manages a Node by (`--manage-nodes-with-annotation-selector`).
pub const NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");
/// A Go duration (`30s`, `1.5s`): how long the pod runs before it succeeds.
pub const RUN_FOR: &str = "kwok.gpufair.io/run-for";

/// The stages kwok's module ships that the harness uses, in its `stages/` folder.
const SHIPPED_STAGES: [&str; 4] = [
    "node-initialize.yaml",
    "node-heartbeat-with-lease.yaml",
    "pod-ready.yaml",
    "pod-delete.yaml",
];

/// Completes a running pod after the duration in its [`RUN_FOR`] annotation, with exit code 0
/// (the status kwok's own `pod-complete` stage writes for Job pods).
const POD_COMPLETE_AFTER: &str = r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gpufair-pod-complete-after
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.metadata.annotations["kwok.gpufair.io/run-for"]'
      operator: 'Exists'
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["kwok.gpufair.io/run-for"]'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: PodCompleted
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "False"
        reason: PodCompleted
        type: ContainersReady
      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ $now | Quote }}
            reason: Completed
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Succeeded
"#;

/// The stage file kwok is started with: the shipped stages, then ours.
pub fn stages(binaries: &Binaries) -> Result<String, ControlPlaneError> {
    let mut text = String::new();
    for stage in SHIPPED_STAGES {
        let path = binaries.stages.join(stage);
        let body = std::fs::read_to_string(&path).map_err(|e| ControlPlaneError::Start {
            name: "kwok".into(),
            message: format!("stage file {}: {e}", path.display()),
        })?;
        text.push_str(body.trim_end());
        text.push_str("\n---\n");
    }
    text.push_str(POD_COMPLETE_AFTER);
    Ok(text)
}

/// Starts kwok for the Nodes that carry [`NODE_ANNOTATION`], with its HOME in `dir` so it
/// reads no `~/.kwok` of the user's.
pub fn start(
    binaries: &Binaries,
    kubeconfig: &Path,
    dir: &Path,
) -> Result<Process, ControlPlaneError> {
    let config = dir.join("kwok-stages.yaml");
    std::fs::write(&config, stages(binaries)?).map_err(|e| ControlPlaneError::Start {
        name: "kwok".into(),
        message: format!("{}: {e}", config.display()),
    })?;
    let home = dir.join("kwok-home");
    std::fs::create_dir_all(&home).map_err(|e| ControlPlaneError::Start {
        name: "kwok".into(),
        message: format!("{}: {e}", home.display()),
    })?;
    Process::start(
        "kwok",
        &binaries.kwok,
        vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--config={}", config.display()),
            format!(
                "--manage-nodes-with-annotation-selector={}={}",
                NODE_ANNOTATION.0, NODE_ANNOTATION.1
            ),
            "--node-lease-duration-seconds=40".into(),
        ],
        vec![("HOME".into(), home.display().to_string())],
        dir.join("kwok.log"),
    )
}
