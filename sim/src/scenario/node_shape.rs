//! What each node of a pool offers besides whole GPUs: MIG instances and shared replicas, named
//! and valued by core (the MIG profile grammar and the GPU-equivalent table).

use gpufair_core::mig_profile::MigProfile;
use gpufair_core::units::{ResourceTable, SHARED_GPU_RESOURCE, WHOLE_GPU_RESOURCE};

use super::check::Check;
use super::model::PoolFile;
use super::{ResourceIndex, ResourceSpec, ScenarioError};

/// The resource list every scenario starts from: whole GPUs, at index 0.
pub fn whole_gpus_only() -> Vec<ResourceSpec> {
    vec![ResourceSpec {
        name: WHOLE_GPU_RESOURCE.to_string(),
        gpu_equivalents: 1.0,
    }]
}

fn intern(resources: &mut Vec<ResourceSpec>, name: String, gpu_equivalents: f64) -> ResourceIndex {
    match resources.iter().position(|r| r.name == name) {
        Some(index) => index,
        None => {
            resources.push(ResourceSpec {
                name,
                gpu_equivalents,
            });
            resources.len() - 1
        }
    }
}

/// The slices each node of the pool at `key` offers, adding their resources to `resources`.
pub fn node_slices(
    check: &Check<'_>,
    key: &str,
    pool: &PoolFile,
    resources: &mut Vec<ResourceSpec>,
) -> Result<Vec<(ResourceIndex, u32)>, ScenarioError> {
    let table = ResourceTable::default();
    let mut slices = Vec::new();
    for (profile, &count) in &pool.mig {
        let key = format!("{key}.mig.{profile}");
        let parsed = MigProfile::parse(profile).map_err(|err| check.fail(&key, err.to_string()))?;
        let name = parsed
            .resource_name()
            .map_err(|err| check.fail(&key, err.to_string()))?;
        let value = table
            .gpu_equivalents(&name)
            .map_err(|err| check.fail(&key, err.to_string()))?;
        if count == 0 {
            return Err(check.fail(key, "expected at least 1 instance per node"));
        }
        if slices
            .iter()
            .any(|(r, _): &(usize, u32)| resources[*r].name == name)
        {
            return Err(check.fail(key, format!("{name} is listed twice")));
        }
        slices.push((intern(resources, name, value), count));
    }
    if let Some(replicas) = pool.shared_replicas {
        let key = format!("{key}.sharedReplicas");
        if replicas == 0 {
            return Err(check.fail(key, "expected at least 1 replica per node"));
        }
        let value = table
            .gpu_equivalents(SHARED_GPU_RESOURCE)
            .map_err(|err| check.fail(&key, err.to_string()))?;
        slices.push((
            intern(resources, SHARED_GPU_RESOURCE.to_string(), value),
            replicas,
        ));
    }
    slices.sort_unstable();
    Ok(slices)
}
