//! MIG profile names (`1g.18gb`, `1c.3g.71gb`, `1g.18gb+me`, `1g.23gb-me`), built from what NVML
//! says of an instance the way NVIDIA's go-nvlib does. The grammar itself (parsing, resource
//! names) is core's [`gpufair_core::mig_profile`], so the controller reads what is built here.
//!
//! A name is `[<C>c.]<G>g.<GB>gb` followed by the GPU instance profile's attribute: `+me` (media
//! extensions), `+me.all`, `+gfx`, or `-me` (no media engines, Blackwell). `C` is given only when
//! the compute instance uses fewer slices than its GPU instance. `GB` is the instance's share of
//! the GPU's memory rounded up to an eighth, times the GPU's memory in whole GiB, rounded: that
//! is why an H200's 16 GiB instance is called `18gb`.

use gpufair_core::mig_profile::{AttributeSign, MigProfile};

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// NVML's `NVML_GPU_INSTANCE_PROFILE_COUNT`: GPU instance profile enums run `0..COUNT`.
pub const GPU_INSTANCE_PROFILE_COUNT: u32 = 17;

/// Slices and name suffix of a GPU instance profile enum (`NVML_GPU_INSTANCE_PROFILE_*`).
fn gpu_instance_profile(profile: u32) -> Option<(u32, &'static str)> {
    Some(match profile {
        0 => (1, ""),         // 1_SLICE
        1 => (2, ""),         // 2_SLICE
        2 => (3, ""),         // 3_SLICE
        3 => (4, ""),         // 4_SLICE
        4 => (7, ""),         // 7_SLICE
        5 => (8, ""),         // 8_SLICE
        6 => (6, ""),         // 6_SLICE
        7 => (1, "+me"),      // 1_SLICE_REV1
        8 => (2, "+me"),      // 2_SLICE_REV1
        9 => (1, ""),         // 1_SLICE_REV2
        10 => (1, "+gfx"),    // 1_SLICE_GFX
        11 => (2, "+gfx"),    // 2_SLICE_GFX
        12 => (4, "+gfx"),    // 4_SLICE_GFX
        13 => (1, "-me"),     // 1_SLICE_NO_ME
        14 => (2, "-me"),     // 2_SLICE_NO_ME
        15 => (1, "+me.all"), // 1_SLICE_ALL_ME
        16 => (2, "+me.all"), // 2_SLICE_ALL_ME
        _ => return None,
    })
}

/// What the driver says about one MIG instance, enough to name its profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileFacts {
    /// The GPU instance's profile enum (`NVML_GPU_INSTANCE_PROFILE_*`), not its profile ID.
    pub gpu_instance_profile: u32,
    /// Slices of the compute instance (`computeInstanceSliceCount`).
    pub compute_slices: u32,
    /// The instance's memory (`memorySizeMB`, in MiB).
    pub memory_mib: u64,
    /// The parent GPU's total memory in bytes.
    pub parent_memory_bytes: u64,
}

/// go-nvlib's `getMigMemorySizeGB`.
pub fn memory_gb(parent_memory_bytes: u64, memory_mib: u64) -> u64 {
    if parent_memory_bytes == 0 {
        return 0;
    }
    let fraction = (memory_mib * MIB) as f64 / parent_memory_bytes as f64;
    let fraction = (fraction * 8.0).ceil() / 8.0;
    let total_gb = parent_memory_bytes.div_ceil(GIB) as f64;
    (fraction * total_gb).round() as u64
}

/// The profile name, or why it cannot be built.
pub fn profile_name(facts: &ProfileFacts) -> Result<String, String> {
    profile(facts).map(|p| p.to_string())
}

fn profile(facts: &ProfileFacts) -> Result<MigProfile, String> {
    let (gpu_slices, suffix) =
        gpu_instance_profile(facts.gpu_instance_profile).ok_or_else(|| {
            format!(
                "unknown GPU instance profile {} (known: 0..{GPU_INSTANCE_PROFILE_COUNT})",
                facts.gpu_instance_profile
            )
        })?;
    if facts.compute_slices == 0 || facts.compute_slices > gpu_slices {
        return Err(format!(
            "compute instance of {} slices in a GPU instance of {gpu_slices}",
            facts.compute_slices
        ));
    }
    if facts.parent_memory_bytes == 0 {
        return Err("the parent GPU's memory size is unknown".into());
    }
    let gb = memory_gb(facts.parent_memory_bytes, facts.memory_mib);
    let attribute = match suffix.split_at_checked(1) {
        Some(("+", word)) => Some((AttributeSign::Plus, word.to_string())),
        Some(("-", word)) => Some((AttributeSign::Minus, word.to_string())),
        _ => None,
    };
    if gb == 0 {
        return Err(format!(
            "an instance of {} MiB rounds to 0 GB of its GPU",
            facts.memory_mib
        ));
    }
    Ok(MigProfile {
        compute_slices: facts.compute_slices,
        gpu_slices,
        memory_gb: gb,
        attribute,
    })
}

/// The profile at the end of a MIG device's name (`NVIDIA H200 MIG 1g.18gb-me` → `1g.18gb-me`).
/// Only a fallback: the name is what the driver chose to print, not the profile itself.
pub fn from_device_name(name: &str) -> Option<String> {
    let (_, profile) = name.rsplit_once(" MIG ")?;
    let profile = profile.trim();
    MigProfile::parse(profile).ok().map(|_| profile.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory sizes from NVIDIA's go-nvml mock servers and `nvidia-smi mig -lgip`.
    const A100_40GB: u64 = 40960 * MIB;
    const H100_80GB: u64 = 81559 * MIB;
    const H200_141GB: u64 = 143771 * MIB;

    fn name(gi_profile: u32, compute_slices: u32, memory_mib: u64, parent: u64) -> String {
        profile_name(&ProfileFacts {
            gpu_instance_profile: gi_profile,
            compute_slices,
            memory_mib,
            parent_memory_bytes: parent,
        })
        .unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn names_match_nvidias_for_known_gpus() {
        assert_eq!(name(0, 1, 4864, A100_40GB), "1g.5gb");
        assert_eq!(name(1, 2, 9856, A100_40GB), "2g.10gb");
        assert_eq!(name(2, 3, 19968, A100_40GB), "3g.20gb");
        assert_eq!(name(4, 7, 40192, A100_40GB), "7g.40gb");
        assert_eq!(name(0, 1, 9856, H100_80GB), "1g.10gb");
        assert_eq!(name(9, 1, 19968, H100_80GB), "1g.20gb");
        assert_eq!(name(4, 7, 80384, H100_80GB), "7g.80gb");
        assert_eq!(name(0, 1, 16384, H200_141GB), "1g.18gb");
        assert_eq!(name(2, 3, 65536, H200_141GB), "3g.71gb");
        // Compute instance smaller than its GPU instance.
        assert_eq!(name(2, 1, 65536, H200_141GB), "1c.3g.71gb");
    }

    #[test]
    fn attributes_come_from_the_gpu_instance_profile() {
        assert_eq!(name(7, 1, 16384, H200_141GB), "1g.18gb+me");
        assert_eq!(name(13, 1, 16384, H200_141GB), "1g.18gb-me");
        assert_eq!(name(14, 2, 32768, H200_141GB), "2g.35gb-me");
        assert_eq!(name(15, 1, 16384, H200_141GB), "1g.18gb+me.all");
        assert_eq!(name(12, 4, 65536, H200_141GB), "4g.71gb+gfx");
        let bad = |gi, ci| {
            profile_name(&ProfileFacts {
                gpu_instance_profile: gi,
                compute_slices: ci,
                memory_mib: 1,
                parent_memory_bytes: H200_141GB,
            })
        };
        assert!(
            bad(17, 1)
                .unwrap_err()
                .contains("unknown GPU instance profile")
        );
        assert!(
            bad(0, 2)
                .unwrap_err()
                .contains("compute instance of 2 slices")
        );
    }

    #[test]
    fn device_names_give_their_profile() {
        assert_eq!(
            from_device_name("NVIDIA B200 MIG 1g.23gb-me").as_deref(),
            Some("1g.23gb-me")
        );
        assert_eq!(
            from_device_name("NVIDIA A100-SXM4-80GB MIG 3g.40gb").as_deref(),
            Some("3g.40gb")
        );
        assert_eq!(from_device_name("NVIDIA H200"), None);
        assert_eq!(from_device_name("NVIDIA H200 MIG "), None);
        assert_eq!(from_device_name("NVIDIA H200 MIG 1g"), None);
    }

    /// Every name built here is one core's grammar reads back, as the controller will.
    #[test]
    fn built_names_parse_back_the_same() {
        for gi in 0..GPU_INSTANCE_PROFILE_COUNT {
            let (slices, _) = gpu_instance_profile(gi).expect("known profile");
            for ci in 1..=slices {
                let facts = ProfileFacts {
                    gpu_instance_profile: gi,
                    compute_slices: ci,
                    memory_mib: 16384,
                    parent_memory_bytes: H200_141GB,
                };
                let built = profile(&facts).expect("buildable");
                let name = built.to_string();
                assert_eq!(MigProfile::parse(&name), Ok(built.clone()), "{name}");
                let resource = built.resource_name().expect("a resource name");
                assert_eq!(
                    MigProfile::from_resource_name(&resource),
                    Some(Ok(built)),
                    "{resource}"
                );
            }
        }
    }
}
