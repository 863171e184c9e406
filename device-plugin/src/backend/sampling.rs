//! Turning the driver's answers about one device into usage, the same way for NVML and the fake
//! backend, so that every driver error the fake can produce meets the code the real one runs.
//!
//! - SM utilization, memory in use and processes are independent readings: one failing does not
//!   discard the others.
//! - Processes come from three lists (compute, graphics, MPS clients), merged by PID; the same
//!   process may appear in several with its (one) memory figure.
//! - A failing per-process utilization sample means "no samples", never "no processes".

use std::collections::BTreeMap;

use nvml_wrapper::error::NvmlError;

use super::{DeviceUsage, ProcessUsage};

/// One entry of a driver process list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedProcess {
    pub pid: u32,
    /// `None` when the driver does not say (e.g. without permission, or under MPS).
    pub memory_bytes: Option<u64>,
}

/// One per-process utilization sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtilizationSample {
    pub pid: u32,
    /// Microseconds since the epoch.
    pub timestamp: u64,
    /// Percent of the device's SMs, 0..=100.
    pub sm_percent: u32,
}

/// Which list a process list came from, for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessList {
    Compute,
    Graphics,
    Mps,
}

/// The processes on a device and the newest sample timestamp seen (to ask only for newer ones
/// next time). A failed list is logged and skipped; failed samples are "no samples".
pub fn merge_processes(
    device: &str,
    lists: Vec<(ProcessList, Result<Vec<ListedProcess>, NvmlError>)>,
    samples: Result<Vec<UtilizationSample>, NvmlError>,
    since: Option<u64>,
) -> (Vec<ProcessUsage>, Option<u64>) {
    let mut by_pid: BTreeMap<u32, ProcessUsage> = BTreeMap::new();
    for (list, result) in lists {
        let processes = match result {
            Ok(processes) => processes,
            // Not reported for this kind of device (e.g. graphics on a compute-only GPU).
            Err(NvmlError::NotSupported) => continue,
            Err(err) => {
                tracing::debug!(%device, ?list, %err, "cannot read this process list; using the others");
                continue;
            }
        };
        for process in processes {
            let entry = by_pid.entry(process.pid).or_insert(ProcessUsage {
                pid: process.pid,
                memory_bytes: 0,
                sm_utilization: None,
            });
            // A process with several contexts is listed once per kind with the same memory.
            entry.memory_bytes = entry.memory_bytes.max(process.memory_bytes.unwrap_or(0));
        }
    }
    let samples = match samples {
        Ok(samples) => samples,
        // NotFound: no sample in the buffer yet. NotSupported: MIG. InsufficientSize: more
        // samples arrived between the count and the data call. All mean "nothing this time".
        Err(err) => {
            if !matches!(err, NvmlError::NotFound | NvmlError::NotSupported) {
                tracing::debug!(%device, %err, "no per-process utilization samples this time");
            }
            Vec::new()
        }
    };
    let mut newest = since;
    let mut sums: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for sample in samples {
        newest = Some(newest.unwrap_or(0).max(sample.timestamp));
        let entry = sums.entry(sample.pid).or_default();
        entry.0 += u64::from(sample.sm_percent);
        entry.1 += 1;
    }
    for (pid, (sum, n)) in sums {
        let util = (sum as f64 / n as f64 / 100.0).clamp(0.0, 1.0);
        by_pid
            .entry(pid)
            .or_insert(ProcessUsage {
                pid,
                memory_bytes: 0,
                sm_utilization: None,
            })
            .sm_utilization = Some(util);
    }
    (by_pid.into_values().collect(), newest)
}

/// One device-wide utilization sample from the driver's buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BusySample {
    /// Microseconds since the epoch.
    pub timestamp: u64,
    /// Percent of the sample period during which a kernel ran, 0..=100.
    pub percent: f64,
}

/// A driver sample's value as a number, whatever type NVML stored it in.
pub fn sample_value(value: &nvml_wrapper::enums::device::SampleValue) -> f64 {
    use nvml_wrapper::enums::device::SampleValue;
    match value {
        SampleValue::F64(v) => *v,
        SampleValue::U32(v) => f64::from(*v),
        SampleValue::U64(v) => *v as f64,
        SampleValue::I64(v) => *v as f64,
    }
}

/// The device-wide samples taken since the previous reading, summarised.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BusyMean {
    /// Their mean, as a fraction of time.
    pub fraction: f64,
    /// The oldest and newest timestamps among them.
    pub oldest: u64,
    pub newest: u64,
    pub count: u32,
}

impl BusyMean {
    /// How far back the driver's buffer reached, when it did not reach back to `since`: the
    /// oldest sample is more than two sample periods after it, so the samples in between were
    /// overwritten before they were read.
    pub fn buffer_span_short_of(&self, since: u64) -> Option<std::time::Duration> {
        // With one sample, or all at one instant, the period is unknown: nothing to tell.
        if self.count < 2 || self.newest == self.oldest {
            return None;
        }
        let period = (self.newest - self.oldest) / u64::from(self.count - 1);
        (self.oldest > since.saturating_add(2 * period))
            .then(|| std::time::Duration::from_micros(self.newest - self.oldest))
    }
}

/// The samples newer than `since`; `None` when there is none. The driver samples at a fixed
/// period (about 1/5 s on an H200), so the mean is the share of the interval during which
/// kernels ran. A single device-wide reading covers the last period only: on an H200 whose one
/// process was busy 62% of the time, readings 100 ms apart ranged from 0 to 100% while this
/// mean stayed between 0.59 and 0.64.
pub fn mean_busy_since(samples: &[BusySample], since: Option<u64>) -> Option<BusyMean> {
    let newer = samples
        .iter()
        .filter(|s| since.is_none_or(|seen| s.timestamp > seen) && s.percent.is_finite());
    let (mut sum, mut count, mut oldest, mut newest) = (0.0, 0u32, u64::MAX, 0u64);
    for sample in newer {
        sum += sample.percent.clamp(0.0, 100.0);
        count += 1;
        oldest = oldest.min(sample.timestamp);
        newest = newest.max(sample.timestamp);
    }
    (count > 0).then(|| BusyMean {
        fraction: sum / f64::from(count) / 100.0,
        oldest,
        newest,
        count,
    })
}

/// What is known about a device's SM utilization.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UtilizationReading {
    /// 0..=1.
    Measured(f64),
    /// Measurable, but not this time (GPM needs two samples; the first call has one).
    NotYet,
}

/// Device counters from the device-wide utilization, the MIG instance's GPM reading (only for
/// MIG instances, where device-wide rates are NotSupported) and memory in use.
pub fn device_usage(
    device: &str,
    rates: Result<UtilizationReading, NvmlError>,
    mig_gpm: Option<Result<UtilizationReading, NvmlError>>,
    memory_used: Result<u64, NvmlError>,
) -> DeviceUsage {
    let mut charge_allocation = false;
    let reading = match (rates, mig_gpm) {
        (Ok(reading), _) => Some(reading),
        (Err(_), Some(Ok(reading))) => Some(reading),
        // No GPU performance monitoring on this MIG instance (before Hopper): nothing can
        // measure it, so its holder is charged the allocation.
        (Err(_), Some(Err(NvmlError::NotSupported))) => {
            charge_allocation = true;
            None
        }
        (Err(err), Some(Err(gpm_err))) => {
            tracing::debug!(%device, %err, %gpm_err, "no utilization this time");
            None
        }
        (Err(NvmlError::NotSupported), None) => None,
        (Err(err), None) => {
            tracing::debug!(%device, %err, "no utilization this time; memory is still read");
            None
        }
    };
    let utilization = match reading {
        Some(UtilizationReading::Measured(value)) => Some(value.clamp(0.0, 1.0)),
        Some(UtilizationReading::NotYet) | None => None,
    };
    let memory_used_bytes = match memory_used {
        Ok(used) => Some(used),
        Err(err) => {
            tracing::debug!(%device, %err, "no memory reading this time");
            None
        }
    };
    DeviceUsage {
        utilization,
        memory_used_bytes,
        charge_allocation,
    }
}

#[cfg(test)]
mod tests {

    fn busy(timestamp: u64, percent: f64) -> BusySample {
        BusySample { timestamp, percent }
    }

    #[test]
    fn busy_mean_counts_only_samples_newer_than_the_last_seen() {
        let samples = [
            busy(10, 100.0),
            busy(20, 0.0),
            busy(30, 100.0),
            busy(40, 50.0),
        ];
        let all = mean_busy_since(&samples, None).expect("samples");
        assert_eq!(
            (all.fraction, all.oldest, all.newest, all.count),
            (0.625, 10, 40, 4)
        );
        let newer = mean_busy_since(&samples, Some(20)).expect("newer samples");
        assert_eq!((newer.fraction, newer.oldest, newer.count), (0.75, 30, 2));
        assert_eq!(mean_busy_since(&samples, Some(40)), None);
        assert_eq!(mean_busy_since(&[], None), None);
    }

    #[test]
    fn a_buffer_that_did_not_reach_back_is_told_apart() {
        let samples = [busy(100, 50.0), busy(110, 50.0), busy(120, 50.0)];
        let mean = mean_busy_since(&samples, Some(90)).expect("samples");
        // One period (10 µs) since the last reading: nothing was lost.
        assert_eq!(mean.buffer_span_short_of(90), None);
        // Five periods: the buffer, 20 µs deep, was overwritten in between.
        assert_eq!(
            mean.buffer_span_short_of(50),
            Some(std::time::Duration::from_micros(20))
        );
        let single = mean_busy_since(&samples[..1], Some(0)).expect("one sample");
        assert_eq!(single.buffer_span_short_of(0), None);
        let same_instant = mean_busy_since(&[busy(100, 1.0), busy(100, 2.0)], Some(0));
        assert_eq!(same_instant.expect("samples").buffer_span_short_of(0), None);
    }

    #[test]
    fn busy_mean_ignores_nonsense_and_clamps() {
        let samples = [busy(1, f64::NAN), busy(2, 150.0), busy(3, -5.0)];
        let mean = mean_busy_since(&samples, None).expect("samples");
        assert_eq!((mean.fraction, mean.oldest, mean.count), (0.5, 2, 2));
    }
    use super::*;

    fn listed(pid: u32, mib: u64) -> ListedProcess {
        ListedProcess {
            pid,
            memory_bytes: Some(mib << 20),
        }
    }

    #[test]
    fn lists_merge_by_pid_and_a_failed_sample_keeps_the_processes() {
        let (processes, newest) = merge_processes(
            "GPU-a",
            vec![
                (
                    ProcessList::Compute,
                    Ok(vec![listed(10, 100), listed(20, 50)]),
                ),
                (
                    ProcessList::Graphics,
                    Ok(vec![listed(10, 100), listed(30, 5)]),
                ),
                (ProcessList::Mps, Err(NvmlError::Unknown)),
            ],
            Err(NvmlError::InsufficientSize(None)),
            Some(7),
        );
        let pids: Vec<_> = processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [10, 20, 30]);
        assert_eq!(processes[0].memory_bytes, 100 << 20);
        assert!(processes.iter().all(|p| p.sm_utilization.is_none()));
        assert_eq!(newest, Some(7));
    }

    #[test]
    fn samples_average_per_pid_and_advance_the_timestamp() {
        let sample = |pid, timestamp, sm_percent| UtilizationSample {
            pid,
            timestamp,
            sm_percent,
        };
        let (processes, newest) = merge_processes(
            "GPU-a",
            vec![(ProcessList::Compute, Ok(vec![listed(10, 1)]))],
            Ok(vec![
                sample(10, 5, 40),
                sample(10, 9, 60),
                sample(11, 8, 10),
            ]),
            None,
        );
        assert_eq!(processes[0].sm_utilization, Some(0.5));
        assert_eq!(processes[1].pid, 11);
        assert_eq!(processes[1].sm_utilization, Some(0.1));
        assert_eq!(newest, Some(9));
    }

    #[test]
    fn a_failed_utilization_keeps_memory_and_mig_without_gpm_charges_allocation() {
        let usage = device_usage("GPU-a", Err(NvmlError::Unknown), None, Ok(42));
        assert_eq!(usage.utilization, None);
        assert_eq!(usage.memory_used_bytes, Some(42));
        assert!(!usage.charge_allocation);
        let mig = device_usage(
            "MIG-a",
            Err(NvmlError::NotSupported),
            Some(Err(NvmlError::NotSupported)),
            Ok(1),
        );
        assert!(mig.charge_allocation);
        let hopper = device_usage(
            "MIG-b",
            Err(NvmlError::NotSupported),
            Some(Ok(UtilizationReading::Measured(0.3))),
            Err(NvmlError::NoPermission),
        );
        assert_eq!(hopper.utilization, Some(0.3));
        assert_eq!(hopper.memory_used_bytes, None);
        assert!(!hopper.charge_allocation);
    }
}
