//! Driver faults of the fake backend that start and clear: scripted in the fake GPU file
//! (`faults:` with `from`/`until`) or switched on and off while running (tests, benchmarks).
//!
//! ```yaml
//! faults:                                   # per GPU, all optional
//!   - { from: 5s, until: 9s, lost: true }   # every call answers GPU_IS_LOST, then it is back
//!   - { from: 2s, until: 4s, calls: Unknown }       # queries (usage, processes, health probe)
//!                                                   # fail with this error
//!   - { from: 1s, until: 3s, eventWait: Unknown }   # waiting for events fails (for the whole
//!                                                   # node's event set)
//! ```
//!
//! `from` defaults to the start, `until` to never; each entry names exactly one fault.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use nvml_wrapper::error::NvmlError;
use serde::Deserialize;

use crate::duration::HumanDuration;

/// The NVML errors a scripted call can return.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum FakeError {
    NoPermission,
    InsufficientSize,
    NotSupported,
    GpuIsLost,
    Unknown,
}

impl FakeError {
    pub fn nvml(self) -> NvmlError {
        match self {
            FakeError::NoPermission => NvmlError::NoPermission,
            FakeError::InsufficientSize => NvmlError::InsufficientSize(None),
            FakeError::NotSupported => NvmlError::NotSupported,
            FakeError::GpuIsLost => NvmlError::GpuLost,
            FakeError::Unknown => NvmlError::Unknown,
        }
    }
}

/// One `faults:` entry as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct FaultEntry {
    #[serde(default)]
    from: Option<HumanDuration>,
    #[serde(default)]
    until: Option<HumanDuration>,
    #[serde(default)]
    lost: bool,
    #[serde(default)]
    calls: Option<FakeError>,
    #[serde(default)]
    event_wait: Option<FakeError>,
}

/// A fault, scripted or live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The GPU answers GPU_IS_LOST to everything, as when it falls off the bus.
    Lost,
    /// Queries of the GPU (usage, processes, the health probe) fail with this error.
    Calls(FakeError),
    /// Waiting on the event set fails with this error (the set is the node's, so this affects
    /// every GPU's watch, whichever GPU it is scripted on).
    EventWait(FakeError),
}

#[derive(Debug, Clone)]
struct Window {
    gpu: usize,
    from: Duration,
    until: Option<Duration>,
    fault: Fault,
}

impl Window {
    fn active(&self, elapsed: Duration) -> bool {
        elapsed >= self.from && self.until.is_none_or(|until| elapsed < until)
    }
}

/// Every fault the fake knows: scripted windows and live switches.
#[derive(Debug)]
pub(super) struct Faults {
    start: Instant,
    windows: Vec<Window>,
    live: Mutex<Vec<(usize, Fault)>>,
}

impl Faults {
    pub(super) fn new(start: Instant) -> Faults {
        Faults {
            start,
            windows: Vec::new(),
            live: Mutex::new(Vec::new()),
        }
    }

    /// Checks and adds GPU `gpu`'s entries; errors name the entry (`key` is `gpus[i].faults`).
    pub(super) fn script(
        &mut self,
        gpu: usize,
        entries: Vec<FaultEntry>,
        key: &str,
    ) -> Result<(), String> {
        for (j, entry) in entries.into_iter().enumerate() {
            let fkey = format!("{key}[{j}]");
            let mut named = Vec::new();
            if entry.lost {
                named.push(Fault::Lost);
            }
            if let Some(err) = entry.calls {
                named.push(Fault::Calls(err));
            }
            if let Some(err) = entry.event_wait {
                named.push(Fault::EventWait(err));
            }
            let [fault] = named[..] else {
                return Err(format!(
                    "{fkey}: name exactly one fault: lost: true, calls: ERROR or eventWait: ERROR \
                     (errors: NoPermission, InsufficientSize, NotSupported, GpuIsLost, Unknown)"
                ));
            };
            let from = entry.from.map_or(Duration::ZERO, |d| d.0);
            let until = entry.until.map(|d| d.0);
            if until.is_some_and(|until| until <= from) {
                return Err(format!("{fkey}.until: must be later than from"));
            }
            self.windows.push(Window {
                gpu,
                from,
                until,
                fault,
            });
        }
        Ok(())
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Vec<(usize, Fault)>> {
        self.live
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Switches `fault` on for GPU `gpu` until [`Faults::clear`].
    pub(super) fn inject(&self, gpu: usize, fault: Fault) {
        let mut live = self.live();
        if !live.contains(&(gpu, fault)) {
            live.push((gpu, fault));
        }
    }

    /// Switches every live fault of GPU `gpu` off (scripted windows run their course).
    pub(super) fn clear(&self, gpu: usize) {
        self.live().retain(|(g, _)| *g != gpu);
    }

    /// The faults active on `gpu` now.
    fn active(&self, gpu: usize) -> Vec<Fault> {
        let elapsed = self.start.elapsed();
        let mut faults: Vec<Fault> = self
            .windows
            .iter()
            .filter(|w| w.gpu == gpu && w.active(elapsed))
            .map(|w| w.fault)
            .collect();
        faults.extend(
            self.live()
                .iter()
                .filter(|(g, _)| *g == gpu)
                .map(|(_, f)| *f),
        );
        faults
    }

    pub(super) fn is_lost(&self, gpu: usize) -> bool {
        self.active(gpu).contains(&Fault::Lost)
    }

    /// The error queries of `gpu` fail with now, if any.
    pub(super) fn call_failure(&self, gpu: usize) -> Option<FakeError> {
        self.active(gpu).into_iter().find_map(|f| match f {
            Fault::Calls(err) => Some(err),
            _ => None,
        })
    }

    /// The error waiting for events fails with now, if any.
    pub(super) fn event_wait_failure(&self) -> Option<FakeError> {
        let elapsed = self.start.elapsed();
        let scripted = self
            .windows
            .iter()
            .filter(|w| w.active(elapsed))
            .map(|w| w.fault);
        let live: Vec<Fault> = self.live().iter().map(|(_, f)| *f).collect();
        scripted.chain(live).find_map(|f| match f {
            Fault::EventWait(err) => Some(err),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(yaml: &str) -> Vec<FaultEntry> {
        crate::duration::from_yaml(yaml).expect("entries parse")
    }

    #[test]
    fn windows_open_and_close_and_live_faults_clear() {
        let start = Instant::now() - Duration::from_secs(5);
        let mut faults = Faults::new(start);
        faults
            .script(
                0,
                entries("[{from: 4s, until: 6s, lost: true}, {from: 10s, calls: Unknown}]"),
                "gpus[0].faults",
            )
            .expect("valid");
        faults
            .script(
                1,
                entries("[{until: 1s, eventWait: Unknown}]"),
                "gpus[1].faults",
            )
            .expect("valid");
        assert!(faults.is_lost(0) && !faults.is_lost(1));
        assert_eq!(faults.call_failure(0), None);
        assert_eq!(faults.event_wait_failure(), None, "window over at 1s");
        faults.inject(1, Fault::Calls(FakeError::NoPermission));
        faults.inject(1, Fault::EventWait(FakeError::Unknown));
        assert_eq!(faults.call_failure(1), Some(FakeError::NoPermission));
        assert_eq!(faults.event_wait_failure(), Some(FakeError::Unknown));
        faults.clear(1);
        assert_eq!(faults.call_failure(1), None);
        assert_eq!(faults.event_wait_failure(), None);
    }

    #[test]
    fn an_entry_names_exactly_one_fault_and_a_real_window() {
        let mut faults = Faults::new(Instant::now());
        let err = faults
            .script(
                0,
                entries("[{lost: true, calls: Unknown}]"),
                "gpus[0].faults",
            )
            .unwrap_err();
        assert!(
            err.starts_with("gpus[0].faults[0]: name exactly one"),
            "{err}"
        );
        let err = faults
            .script(0, entries("[{}]"), "gpus[0].faults")
            .unwrap_err();
        assert!(err.contains("exactly one"), "{err}");
        let err = faults
            .script(
                0,
                entries("[{from: 3s, until: 2s, lost: true}]"),
                "gpus[0].faults",
            )
            .unwrap_err();
        assert_eq!(err, "gpus[0].faults[0].until: must be later than from");
    }
}
