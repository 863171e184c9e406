//! Reading and writing WorkloadFamily objects: the families' histories, kept in the cluster so
//! the webhook can read them and a new leader starts from them.

use gpufair_api::WorkloadFamily;
use serde_json::json;

use crate::apply::{Applier, ApplyError};
use crate::families::{FamilyKey, TrackedFamily};
use crate::kube_api::ControllerApi;

/// Every stored family. A cluster without the CRD (or a refused list) gives none: right-sizing
/// then starts from no history, which only makes it decline longer.
pub async fn load(api: &impl ControllerApi) -> Vec<WorkloadFamily> {
    match api.workload_families().await {
        Ok(families) => families,
        Err(err) => {
            tracing::warn!(error = %err, "cannot list WorkloadFamilies; right-sizing history starts empty");
            Vec::new()
        }
    }
}

/// Creates or updates one family (server-side apply of the spec, then of the status).
async fn write_one(
    applier: &Applier,
    (namespace, name): &FamilyKey,
    family: &TrackedFamily,
) -> Result<(), ApplyError> {
    applier.check_leader()?;
    let object = json!({
        "apiVersion": "gpufair.io/v1alpha1",
        "kind": "WorkloadFamily",
        "metadata": {"name": name, "namespace": namespace},
        "spec": family.spec,
    });
    applier
        .api()
        .apply_workload_family(namespace, name, &object)
        .await?;
    let status = json!({
        "apiVersion": "gpufair.io/v1alpha1",
        "kind": "WorkloadFamily",
        "metadata": {"name": name, "namespace": namespace},
        "status": family.status(),
    });
    applier
        .api()
        .apply_workload_family_status(namespace, name, &status)
        .await?;
    Ok(())
}

/// Writes `families` (those folded into since their last write) and returns the keys written;
/// a failed one stays due. Fails only when this replica no longer leads, and then writes no more.
pub async fn write(
    applier: &Applier,
    families: Vec<(FamilyKey, TrackedFamily)>,
) -> Result<Vec<FamilyKey>, ApplyError> {
    let mut written = Vec::with_capacity(families.len());
    for (key, family) in families {
        match write_one(applier, &key, &family).await {
            Ok(()) => written.push(key),
            Err(ApplyError::NotLeader(err)) => return Err(ApplyError::NotLeader(err)),
            Err(err) => tracing::warn!(
                error = %err,
                namespace = %key.0,
                family = %key.1,
                "WorkloadFamily write failed; retried at the next status write"
            ),
        }
    }
    Ok(written)
}
