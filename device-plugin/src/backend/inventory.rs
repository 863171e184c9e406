//! Deciding what a GPU is from the driver's answers, the same way for NVML and the fake backend.
//!
//! One GPU that cannot be read must not take the node down: a GPU whose identity, MIG mode or
//! (when offered whole) memory cannot be read is skipped with its reason; everything else about
//! it degrades to a warning. In particular a MIG GPU's total memory needs monitoring rights
//! inside a container (`NVIDIA_MIG_MONITOR_DEVICES=all` and `SYS_ADMIN`); without them its
//! instances are still offered.

use nvml_wrapper::error::NvmlError;

use super::{GpuInfo, MigInfo, SkippedGpu};

/// Everything read about one GPU, each reading with its own outcome.
#[derive(Debug)]
pub struct GpuReadings {
    pub index: u32,
    pub uuid: Result<String, NvmlError>,
    pub minor: Result<u32, NvmlError>,
    pub model: Result<String, NvmlError>,
    pub memory_total: Result<u64, NvmlError>,
    /// Current MIG mode; NotSupported means a GPU without MIG.
    pub mig_enabled: Result<bool, NvmlError>,
    pub numa_node: Option<i64>,
    /// The readable instances (unreadable ones were logged and left out by the reader).
    pub mig: Vec<MigInfo>,
}

fn skip(readings: &GpuReadings, what: &str, err: &NvmlError) -> SkippedGpu {
    SkippedGpu {
        index: readings.index,
        uuid: readings.uuid.as_ref().ok().cloned(),
        reason: format!("cannot read its {what}: {err}"),
    }
}

/// The GPU as offered, or why it is not offered.
pub fn assemble(readings: GpuReadings) -> Result<GpuInfo, SkippedGpu> {
    let uuid = match &readings.uuid {
        Ok(uuid) => uuid.clone(),
        Err(err) => return Err(skip(&readings, "UUID", err)),
    };
    let minor = match &readings.minor {
        Ok(minor) => *minor,
        Err(err) => return Err(skip(&readings, "minor number", err)),
    };
    let mig_enabled = match &readings.mig_enabled {
        Ok(enabled) => *enabled,
        Err(NvmlError::NotSupported) => false,
        // Offering it whole could hand out a MIG GPU that CUDA cannot use.
        Err(err) => return Err(skip(&readings, "MIG mode", err)),
    };
    let memory_bytes = match (&readings.memory_total, mig_enabled) {
        (Ok(total), _) => *total,
        (Err(err), true) => {
            tracing::warn!(%uuid, %err, "cannot read the MIG GPU's memory size (set NVIDIA_MIG_MONITOR_DEVICES=all and give SYS_ADMIN); its instances are still offered");
            0
        }
        (Err(err), false) => return Err(skip(&readings, "memory size", err)),
    };
    let model = match &readings.model {
        Ok(model) => model.clone(),
        Err(err) => {
            tracing::warn!(%uuid, %err, "cannot read the GPU's name");
            "unknown".to_string()
        }
    };
    if mig_enabled && readings.mig.is_empty() {
        tracing::warn!(%uuid, "MIG is enabled but no MIG devices are configured: the GPU is not offered until its instances exist");
    }
    if !mig_enabled && !readings.mig.is_empty() {
        tracing::warn!(%uuid, "MIG instances listed on a GPU with MIG off; ignoring them");
    }
    Ok(GpuInfo {
        uuid,
        index: readings.index,
        minor,
        model,
        memory_bytes,
        numa_node: readings.numa_node,
        mig_enabled,
        mig: if mig_enabled {
            readings.mig
        } else {
            Vec::new()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readings() -> GpuReadings {
        GpuReadings {
            index: 2,
            uuid: Ok("GPU-a".into()),
            minor: Ok(5),
            model: Ok("NVIDIA H200".into()),
            memory_total: Ok(1 << 30),
            mig_enabled: Err(NvmlError::NotSupported),
            numa_node: None,
            mig: Vec::new(),
        }
    }

    #[test]
    fn a_mig_gpu_without_memory_rights_is_kept_a_whole_one_is_skipped() {
        let mut mig = readings();
        mig.mig_enabled = Ok(true);
        mig.memory_total = Err(NvmlError::NoPermission);
        let gpu = assemble(mig).expect("MIG GPU kept");
        assert!(gpu.mig_enabled);
        assert_eq!(gpu.memory_bytes, 0);

        let mut whole = readings();
        whole.memory_total = Err(NvmlError::NoPermission);
        let skipped = assemble(whole).expect_err("whole GPU skipped");
        assert_eq!(skipped.index, 2);
        assert_eq!(skipped.uuid.as_deref(), Some("GPU-a"));
        assert!(skipped.reason.contains("memory size"), "{}", skipped.reason);

        let mut unknown_mode = readings();
        unknown_mode.mig_enabled = Err(NvmlError::Unknown);
        assert!(
            assemble(unknown_mode)
                .expect_err("skipped")
                .reason
                .contains("MIG mode")
        );
        let gpu = assemble(readings()).expect("plain GPU");
        assert!(!gpu.mig_enabled);
        assert_eq!(gpu.minor, 5);
    }
}
