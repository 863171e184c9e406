//! The AdmissionReview both webhook benches send: a Deployment's GPU training pod as the API
//! server sends it, with defaults, the service-account volume and default tolerations.

use serde_json::json;

/// The review's JSON bytes, with request UID `uid`.
pub fn training_pod_review(uid: &str) -> Vec<u8> {
    let resources =
        json!({"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1", "cpu": "4"}});
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "trainer-7d9f8c-", "namespace": "ml",
            "labels": {"app": "trainer", "ai-task-type": "train", "deadline": "20300101"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer-7d9f8c", "uid": "a1b2", "controller": true}]},
        "spec": {
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}], "defaultMode": 420}}],
            "containers": [{"name": "main", "image": "registry.example.com/trainer:1.0", "resources": resources,
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
                "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {}, "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority"
        }
    });
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "ml",
            "operation": "CREATE", "userInfo": {"username": "bench"}, "object": pod, "oldObject": null, "dryRun": false}
    }))
    .expect("review")
}
