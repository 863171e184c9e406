//! The NVML calls nvml-wrapper 0.13 does not offer, made through its loaded library.
//!
//! The only module of the crate that may use `unsafe`. Every call follows the same pattern,
//! which is what makes it sound:
//! - the function pointer comes from `Nvml::lib()`, the library nvml-wrapper loaded and
//!   initialised, and a missing symbol (an older driver) is an error, never a call;
//! - every handle passed in comes from a live nvml-wrapper object (`Device`, `EventSet`) borrowed
//!   for the duration of the call, and `Nvml` outlives them (the backend leaks it);
//! - every out-parameter is a zero-initialised, properly aligned local of the exact C type, which
//!   is plain data (integers and handles), so all-zero is a valid value and NVML only writes it;
//! - NVML's return code is checked before any out-parameter is read.
//!
//! Nothing here dereferences a pointer NVML returns; handles go back into NVML only.
#![allow(unsafe_code)]

use std::mem;

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::{Device, EventSet, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlDeviceAttributes_t, nvmlEventData_t, nvmlGpuInstance_t, nvmlGpuInstanceInfo_t,
    nvmlGpuInstanceProfileInfo_t,
};

use super::mig_profile::GPU_INSTANCE_PROFILE_COUNT;
use super::watch::RawEvent;

/// NVML's XID value for "an XID it could not identify".
const UNKNOWN_XID: u64 = 999;

/// Waits for the next event like `EventSet::wait`, but keeps the GPU and compute instance IDs
/// that nvml-wrapper's `EventData` drops.
pub fn wait_event(
    nvml: &'static Nvml,
    set: &EventSet<'static>,
    timeout_ms: u32,
) -> Result<RawEvent, NvmlError> {
    let wait = nvml_sym(nvml.lib().nvmlEventSetWait_v2.as_ref())?;
    // SAFETY: nvmlEventData_t is plain data (a handle and integers); all-zero is valid.
    let mut data: nvmlEventData_t = unsafe { mem::zeroed() };
    // SAFETY: `set` is a live event set borrowed for the call; `data` is a writable local of the
    // exact type NVML fills.
    nvml_try(unsafe { wait(set.handle(), &mut data, timeout_ms) })?;
    // SAFETY: on success NVML put a device handle it owns in `data.device`; it stays valid while
    // NVML is initialised, which is for the life of the process.
    let device = unsafe { Device::new(data.device, nvml) };
    let event_type = EventTypes::from_bits_truncate(data.eventType);
    let critical_xid = event_type
        .contains(EventTypes::CRITICAL_XID_ERROR)
        .then_some((data.eventData != UNKNOWN_XID).then_some(data.eventData));
    Ok(RawEvent {
        gpu_uuid: device.uuid().ok(),
        critical_xid,
        gpu_instance: data.gpuInstanceId,
        compute_instance: data.computeInstanceId,
    })
}

/// A MIG device's GPU instance ID.
pub fn gpu_instance_id(nvml: &Nvml, mig: &Device<'_>) -> Result<u32, NvmlError> {
    let get = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref())?;
    let mut id: u32 = 0;
    // SAFETY: `mig` is a live device handle; `id` is a writable c_uint.
    nvml_try(unsafe { get(mig.handle(), &mut id) })?;
    Ok(id)
}

/// A MIG device's compute instance ID.
pub fn compute_instance_id(nvml: &Nvml, mig: &Device<'_>) -> Result<u32, NvmlError> {
    let get = nvml_sym(nvml.lib().nvmlDeviceGetComputeInstanceId.as_ref())?;
    let mut id: u32 = 0;
    // SAFETY: `mig` is a live device handle; `id` is a writable c_uint.
    nvml_try(unsafe { get(mig.handle(), &mut id) })?;
    Ok(id)
}

/// A MIG device's size: (GPU instance slices, compute instance slices, memory in MiB).
pub fn mig_attributes(nvml: &Nvml, mig: &Device<'_>) -> Result<(u32, u32, u64), NvmlError> {
    let get = nvml_sym(nvml.lib().nvmlDeviceGetAttributes_v2.as_ref())?;
    // SAFETY: nvmlDeviceAttributes_t is plain integers; all-zero is valid.
    let mut attributes: nvmlDeviceAttributes_t = unsafe { mem::zeroed() };
    // SAFETY: `mig` is a live device handle; `attributes` is a writable local of the exact type.
    nvml_try(unsafe { get(mig.handle(), &mut attributes) })?;
    Ok((
        attributes.gpuInstanceSliceCount,
        attributes.computeInstanceSliceCount,
        attributes.memorySizeMB,
    ))
}

/// The profile enum (`NVML_GPU_INSTANCE_PROFILE_*`) of GPU instance `gpu_instance` on `parent`:
/// the instance knows only its profile *ID*, so every profile enum is asked for its ID, as
/// go-nvlib does.
pub fn gpu_instance_profile(
    nvml: &Nvml,
    parent: &Device<'_>,
    gpu_instance: u32,
) -> Result<u32, NvmlError> {
    let lib = nvml.lib();
    let by_id = nvml_sym(lib.nvmlDeviceGetGpuInstanceById.as_ref())?;
    let get_info = nvml_sym(lib.nvmlGpuInstanceGetInfo.as_ref())?;
    let profile_info = nvml_sym(lib.nvmlDeviceGetGpuInstanceProfileInfo.as_ref())?;
    let mut instance: nvmlGpuInstance_t = std::ptr::null_mut();
    // SAFETY: `parent` is a live device handle; `instance` is a writable handle slot.
    nvml_try(unsafe { by_id(parent.handle(), gpu_instance, &mut instance) })?;
    // SAFETY: nvmlGpuInstanceInfo_t is plain data (a handle and integers); all-zero is valid.
    let mut info: nvmlGpuInstanceInfo_t = unsafe { mem::zeroed() };
    // SAFETY: `instance` was just returned by NVML for this parent and needs no release; `info`
    // is a writable local of the exact type.
    nvml_try(unsafe { get_info(instance, &mut info) })?;
    for profile in 0..GPU_INSTANCE_PROFILE_COUNT {
        // SAFETY: plain integers; all-zero is valid.
        let mut candidate: nvmlGpuInstanceProfileInfo_t = unsafe { mem::zeroed() };
        // SAFETY: `parent` is a live device handle; `candidate` is a writable local of the exact
        // type.
        match nvml_try(unsafe { profile_info(parent.handle(), profile, &mut candidate) }) {
            Ok(()) if candidate.id == info.profileId => return Ok(profile),
            Ok(()) | Err(NvmlError::NotSupported) | Err(NvmlError::InvalidArg) => {}
            Err(err) => return Err(err),
        }
    }
    Err(NvmlError::NotFound)
}

/// Row remapping state: (a remapping waits for a reset, a remapping failed).
pub fn remapped_rows_pending(nvml: &Nvml, device: &Device<'_>) -> Result<(bool, bool), NvmlError> {
    let get = nvml_sym(nvml.lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut correctable, mut uncorrectable, mut pending, mut failed) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: `device` is a live device handle; the four out-parameters are writable c_uints.
    nvml_try(unsafe {
        get(
            device.handle(),
            &mut correctable,
            &mut uncorrectable,
            &mut pending,
            &mut failed,
        )
    })?;
    Ok((pending != 0, failed != 0))
}
