//! Real GPU cluster traces, read into plain arrivals.

pub mod civil_time;
pub mod helios;
pub mod philly;

use std::path::{Path, PathBuf};

/// One job as a trace records it, with its submission relative to the trace's first one.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// Line in the file (1-based), for messages.
    pub line: usize,
    pub submit_s: f64,
    pub duration_s: f64,
    pub gpus: u32,
    /// What groups jobs into queues: Philly's virtual cluster, Helios' user.
    pub key: String,
}

/// A trace file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: cannot read trace: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Malformed {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

impl TraceError {
    pub fn malformed(path: &Path, line: usize, message: impl Into<String>) -> Self {
        Self::Malformed {
            path: path.to_path_buf(),
            line,
            message: message.into(),
        }
    }
}

/// Reads a file, naming it when it cannot be read.
pub(crate) fn read_text(path: &Path) -> Result<String, TraceError> {
    std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Checks that the first line is exactly the expected header.
pub(crate) fn expect_header(
    path: &Path,
    first: Option<&str>,
    header: &str,
) -> Result<(), TraceError> {
    match first.map(str::trim_end) {
        Some(found) if found == header => Ok(()),
        Some(found) => Err(TraceError::malformed(
            path,
            1,
            format!("expected the header {header:?}, found {found:?}"),
        )),
        None => Err(TraceError::malformed(
            path,
            1,
            format!("the file is empty; expected the header {header:?}"),
        )),
    }
}

/// Splits a CSV line into exactly `n` fields (the traces have no quoting).
pub(crate) fn fields<'a>(
    path: &Path,
    line_no: usize,
    line: &'a str,
    n: usize,
    header: &str,
) -> Result<Vec<&'a str>, TraceError> {
    let parts: Vec<&str> = line.trim_end().split(',').collect();
    if parts.len() == n {
        Ok(parts)
    } else {
        Err(TraceError::malformed(
            path,
            line_no,
            format!(
                "expected {n} comma-separated fields ({header}), found {}",
                parts.len()
            ),
        ))
    }
}

/// Parses one numeric field, naming the column on failure.
pub(crate) fn number<T: std::str::FromStr>(
    path: &Path,
    line_no: usize,
    column: &str,
    text: &str,
    expected: &str,
) -> Result<T, TraceError> {
    text.trim().parse().map_err(|_| {
        TraceError::malformed(
            path,
            line_no,
            format!("column {column}: expected {expected}, found {text:?}"),
        )
    })
}
