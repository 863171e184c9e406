//! GetPreferredAllocation: which of the free devices a container should get.
//!
//! - Whole GPUs: the set with the best links among its members (NVLink first, then PCIe
//!   closeness), searched exhaustively when the number of candidate sets is small and greedily
//!   otherwise.
//! - Shared slices and MIG instances: packing. Slices go onto the GPU that is already most used
//!   and still fits the request (best fit), so whole GPUs stay free for whole-GPU work.
//!
//! Devices in `must_include` are always in the answer. Ties break on the resource's device
//! order, so the answer is deterministic.

use std::collections::{BTreeMap, HashMap};

use crate::backend::GpuBackend;
use crate::devices::{DeviceKind, Resource};

/// Above this many candidate sets the search for whole GPUs turns greedy.
const EXHAUSTIVE_LIMIT: u64 = 20_000;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PreferredError {
    #[error("unknown device ID {id:?} for resource {resource}")]
    UnknownDevice { id: String, resource: String },
}

/// Pairwise link scores between whole GPUs, read once at startup.
#[derive(Debug, Clone, Default)]
pub struct LinkMatrix {
    scores: HashMap<(String, String), u32>,
}

impl LinkMatrix {
    /// Scores every pair of whole GPUs; pairs the backend cannot score count as 0.
    pub fn measure(backend: &dyn GpuBackend, gpus: &[String]) -> LinkMatrix {
        let mut scores = HashMap::new();
        for (i, a) in gpus.iter().enumerate() {
            for b in &gpus[i + 1..] {
                let score = backend.link_score(a, b).unwrap_or_else(|err| {
                    tracing::warn!(%a, %b, %err, "cannot read GPU link; treating the pair as unlinked");
                    0
                });
                scores.insert((a.clone(), b.clone()), score);
                scores.insert((b.clone(), a.clone()), score);
            }
        }
        LinkMatrix { scores }
    }

    pub fn score(&self, a: &str, b: &str) -> u32 {
        self.scores
            .get(&(a.to_string(), b.to_string()))
            .copied()
            .unwrap_or(0)
    }
}

pub fn preferred(
    resource: &Resource,
    available: &[String],
    must_include: &[String],
    size: usize,
    links: &LinkMatrix,
) -> Result<Vec<String>, PreferredError> {
    let position = |id: &String| {
        resource
            .position(id)
            .ok_or_else(|| PreferredError::UnknownDevice {
                id: id.clone(),
                resource: resource.name.clone(),
            })
    };
    let mut must: Vec<usize> = must_include
        .iter()
        .map(position)
        .collect::<Result<_, _>>()?;
    must.sort_unstable();
    must.dedup();
    let mut free: Vec<usize> = available.iter().map(position).collect::<Result<_, _>>()?;
    free.sort_unstable();
    free.dedup();
    free.retain(|p| !must.contains(p));
    let wanted = size.saturating_sub(must.len()).min(free.len());

    let chosen = if wanted == 0 {
        Vec::new()
    } else if resource.devices.iter().all(|d| d.kind == DeviceKind::Whole) {
        best_linked(resource, &must, &free, wanted, links)
    } else {
        packed(resource, &must, &free, wanted)
    };
    let mut answer: Vec<usize> = must.into_iter().chain(chosen).collect();
    answer.sort_unstable();
    Ok(answer
        .into_iter()
        .map(|p| resource.devices[p].id.clone())
        .collect())
}

fn set_score(resource: &Resource, members: &[usize], links: &LinkMatrix) -> u64 {
    let mut total = 0u64;
    for (i, &a) in members.iter().enumerate() {
        for &b in &members[i + 1..] {
            total += u64::from(links.score(&resource.devices[a].gpu, &resource.devices[b].gpu));
        }
    }
    total
}

fn binomial(n: usize, k: usize) -> u64 {
    let k = k.min(n - k.min(n));
    let mut result: u64 = 1;
    for i in 0..k {
        result = result.saturating_mul((n - i) as u64) / (i as u64 + 1);
        if result > EXHAUSTIVE_LIMIT {
            return u64::MAX;
        }
    }
    result
}

fn best_linked(
    resource: &Resource,
    must: &[usize],
    free: &[usize],
    wanted: usize,
    links: &LinkMatrix,
) -> Vec<usize> {
    if binomial(free.len(), wanted) <= EXHAUSTIVE_LIMIT {
        let mut best: Option<(u64, Vec<usize>)> = None;
        let mut combo: Vec<usize> = (0..wanted).collect();
        loop {
            let members: Vec<usize> = must
                .iter()
                .copied()
                .chain(combo.iter().map(|&i| free[i]))
                .collect();
            let score = set_score(resource, &members, links);
            // Strictly better only: the first (lowest-ordered) set wins ties.
            if best.as_ref().is_none_or(|(s, _)| score > *s) {
                best = Some((score, combo.iter().map(|&i| free[i]).collect()));
            }
            // Next combination in lexicographic order.
            let Some(i) = (0..wanted)
                .rev()
                .find(|&i| combo[i] < free.len() - wanted + i)
            else {
                break;
            };
            combo[i] += 1;
            for j in i + 1..wanted {
                combo[j] = combo[j - 1] + 1;
            }
        }
        return best.map(|(_, set)| set).unwrap_or_default();
    }
    // Greedy: repeatedly add the device that links best to what is already chosen.
    let mut members: Vec<usize> = must.to_vec();
    let mut left: Vec<usize> = free.to_vec();
    let mut chosen = Vec::new();
    while chosen.len() < wanted && !left.is_empty() {
        let mut best = 0;
        let mut best_score = None;
        for (i, &candidate) in left.iter().enumerate() {
            let score: u64 = members
                .iter()
                .map(|&m| {
                    u64::from(
                        links.score(&resource.devices[m].gpu, &resource.devices[candidate].gpu),
                    )
                })
                .sum();
            if best_score.is_none_or(|s| score > s) {
                best = i;
                best_score = Some(score);
            }
        }
        let pick = left.remove(best);
        members.push(pick);
        chosen.push(pick);
    }
    chosen
}

fn packed(resource: &Resource, must: &[usize], free: &[usize], wanted: usize) -> Vec<usize> {
    // Free devices per GPU, in device order.
    let mut by_gpu: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for &p in free {
        by_gpu
            .entry(resource.devices[p].gpu_index)
            .or_default()
            .push(p);
    }
    let mut chosen = Vec::new();
    let mut remaining = wanted;
    // GPUs the container already touches come first: more slices there cost no new GPU.
    let touched: Vec<u32> = must
        .iter()
        .map(|&p| resource.devices[p].gpu_index)
        .collect();
    for gpu in touched {
        if let Some(slots) = by_gpu.get_mut(&gpu) {
            let take = remaining.min(slots.len());
            chosen.extend(slots.drain(..take));
            remaining -= take;
        }
    }
    while remaining > 0 {
        let candidates = by_gpu.iter().filter(|(_, slots)| !slots.is_empty());
        // Best fit: the fullest GPU that still fits the rest; else the emptiest, to touch as few
        // GPUs as possible.
        let fitting = candidates
            .clone()
            .filter(|(_, slots)| slots.len() >= remaining)
            .min_by_key(|(_, slots)| slots.len());
        let pick = fitting.or_else(|| {
            candidates.max_by_key(|(gpu, slots)| (slots.len(), std::cmp::Reverse(**gpu)))
        });
        let Some((&gpu, _)) = pick else { break };
        if let Some(slots) = by_gpu.get_mut(&gpu) {
            let take = remaining.min(slots.len());
            chosen.extend(slots.drain(..take));
            remaining -= take;
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::FakeBackend;
    use crate::config::{Config, GpuSelector, Sharing};
    use crate::devices::{build, tests::gpu};

    /// Four GPUs where 0–2 and 1–3 are NVLinked.
    fn linked() -> (crate::devices::Inventory, LinkMatrix) {
        let fake = FakeBackend::parse(
            "gpus:
  - { uuid: GPU-0, model: m, memoryMiB: 1, nvlinkPeers: [2] }
  - { uuid: GPU-1, model: m, memoryMiB: 1, nvlinkPeers: [3] }
  - { uuid: GPU-2, model: m, memoryMiB: 1 }
  - { uuid: GPU-3, model: m, memoryMiB: 1 }
",
        )
        .expect("fake");
        let gpus = fake.inventory().expect("inventory").gpus;
        let uuids: Vec<_> = gpus.iter().map(|g| g.uuid.clone()).collect();
        let links = LinkMatrix::measure(&fake, &uuids);
        (build(gpus, &Config::default()).expect("build"), links)
    }

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn whole_gpus_prefer_nvlinked_pairs_and_honour_must_include() {
        let (inv, links) = linked();
        let whole = inv.resource("nvidia.com/gpu").expect("whole");
        let all = ids(&["GPU-0", "GPU-1", "GPU-2", "GPU-3"]);
        assert_eq!(
            preferred(whole, &all, &[], 2, &links),
            Ok(ids(&["GPU-0", "GPU-2"]))
        );
        assert_eq!(
            preferred(whole, &all, &ids(&["GPU-3"]), 2, &links),
            Ok(ids(&["GPU-1", "GPU-3"]))
        );
        assert_eq!(
            preferred(whole, &ids(&["GPU-0", "GPU-1", "GPU-3"]), &[], 2, &links),
            Ok(ids(&["GPU-1", "GPU-3"]))
        );
        // Asking for more than is free returns what there is.
        assert_eq!(
            preferred(whole, &ids(&["GPU-2"]), &[], 3, &links),
            Ok(ids(&["GPU-2"]))
        );
        let err = preferred(whole, &ids(&["GPU-9"]), &[], 1, &links).expect_err("unknown");
        assert!(err.to_string().contains("GPU-9"));
    }

    #[test]
    fn greedy_search_on_large_nodes_still_follows_links() {
        let mut gpus = Vec::new();
        for i in 0..40 {
            let peer = if i % 2 == 0 { i + 1 } else { i - 1 };
            gpus.push(format!(
                "  - {{ uuid: GPU-{i}, model: m, memoryMiB: 1, nvlinkPeers: [{peer}] }}"
            ));
        }
        let fake = FakeBackend::parse(&format!("gpus:\n{}\n", gpus.join("\n"))).expect("fake");
        let inventory = fake.inventory().expect("inventory").gpus;
        let uuids: Vec<_> = inventory.iter().map(|g| g.uuid.clone()).collect();
        let links = LinkMatrix::measure(&fake, &uuids);
        let inv = build(inventory, &Config::default()).expect("build");
        let whole = inv.resource("nvidia.com/gpu").expect("whole");
        let answer = preferred(whole, &uuids, &ids(&["GPU-7"]), 6, &links).expect("answer");
        assert_eq!(answer.len(), 6);
        assert!(
            answer.contains(&"GPU-7".to_string()) && answer.contains(&"GPU-6".to_string()),
            "{answer:?}"
        );
    }

    #[test]
    fn shared_slices_pack_onto_the_fullest_gpu_that_fits() {
        let config = Config {
            sharing: Some(Sharing {
                replicas: 4,
                gpus: vec![GpuSelector::Index(0), GpuSelector::Index(1)],
                fail_requests_greater_than_one: false,
                mps: None,
            }),
            ..Config::default()
        };
        let inv = build(vec![gpu(0, &[]), gpu(1, &[])], &config).expect("build");
        let shared = inv.resource("nvidia.com/gpu.shared").expect("shared");
        let (g0, g1) = (&inv.gpus[0].uuid, &inv.gpus[1].uuid);
        let slice = |g: &str, n: u32| format!("{g}::{n}");
        // GPU 0 has one slice taken (3 free), GPU 1 is untouched (4 free).
        let free = vec![
            slice(g0, 1),
            slice(g0, 2),
            slice(g0, 3),
            slice(g1, 0),
            slice(g1, 1),
            slice(g1, 2),
            slice(g1, 3),
        ];
        let links = LinkMatrix::default();
        assert_eq!(
            preferred(shared, &free, &[], 1, &links),
            Ok(vec![slice(g0, 1)])
        );
        assert_eq!(
            preferred(shared, &free, &[], 3, &links),
            Ok(vec![slice(g0, 1), slice(g0, 2), slice(g0, 3)])
        );
        assert_eq!(
            preferred(shared, &free, &[], 4, &links),
            Ok(free[3..].to_vec())
        );
        // Five slices do not fit one GPU: fill the emptiest, then the rest.
        let five = preferred(shared, &free, &[], 5, &links).expect("five");
        assert_eq!(
            five.iter().filter(|id| id.starts_with(g1.as_str())).count(),
            4
        );
        // must_include pulls the rest onto its GPU.
        assert_eq!(
            preferred(shared, &free, &[slice(g1, 2)], 2, &links),
            Ok(vec![slice(g1, 0), slice(g1, 2)])
        );
    }
}
