//! What can be wrong with a scenario, always naming the file and the line or key.

use std::path::PathBuf;

use crate::trace::TraceError;

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{path}: cannot read scenario: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// YAML syntax, an unknown key, a wrong type or a bad duration (serde names the key).
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    SyntaxNoLocation { path: PathBuf, message: String },
    /// A value that parsed but makes no sense (an unknown queue, a negative weight, …).
    #[error("{path}: {key}: {message}")]
    Invalid {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error("{scenario}: {key}: {source}")]
    Trace {
        scenario: PathBuf,
        key: String,
        source: TraceError,
    },
}
