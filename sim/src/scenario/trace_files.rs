//! The trace files a scenario names: where they are and how they are read.

use std::path::{Path, PathBuf};

use super::model::TraceFormat;
use crate::trace::{self, TraceError, TraceJob};

/// Reads the trace files a scenario names: `(format, resolved path) → jobs`. Files on disk for
/// the simulator; text in memory where the file system must stay out (fuzzing).
pub type TraceReader<'a> = &'a dyn Fn(TraceFormat, &Path) -> Result<Vec<TraceJob>, TraceError>;

/// Reads a trace file from disk.
pub fn read_trace_file(format: TraceFormat, path: &Path) -> Result<Vec<TraceJob>, TraceError> {
    match format {
        TraceFormat::Philly => trace::philly::read(path),
        TraceFormat::Helios => trace::helios::read(path),
    }
}

/// Resolves a trace path: relative paths are relative to the scenario's folder.
pub fn resolve(base_dir: &Path, file: &Path) -> PathBuf {
    if file.is_absolute() {
        file.to_path_buf()
    } else {
        base_dir.join(file)
    }
}
