//! Microsoft Philly (`timestamp,duration,num_gpus,gpu_time,cluster`): unsorted rows, local times.

use std::path::Path;

use super::civil_time::parse_naive_seconds;
use super::{TraceError, TraceJob, expect_header, fields, number, read_text};

pub const HEADER: &str = "timestamp,duration,num_gpus,gpu_time,cluster";

/// Reads the whole file; submissions are made relative to the earliest one.
pub fn read(path: &Path) -> Result<Vec<TraceJob>, TraceError> {
    let text = read_text(path)?;
    parse(path, &text)
}

pub fn parse(path: &Path, text: &str) -> Result<Vec<TraceJob>, TraceError> {
    let mut lines = text.lines();
    expect_header(path, lines.next(), HEADER)?;
    let mut jobs = Vec::new();
    for (index, line) in lines.enumerate() {
        let line_no = index + 2;
        if line.trim().is_empty() {
            continue;
        }
        let parts = fields(path, line_no, line, 5, HEADER)?;
        let submit = parse_naive_seconds(parts[0]).ok_or_else(|| {
            TraceError::malformed(
                path,
                line_no,
                format!(
                    "column timestamp: expected YYYY-MM-DD HH:MM:SS, found {:?}",
                    parts[0]
                ),
            )
        })?;
        let duration: f64 = number(path, line_no, "duration", parts[1], "seconds")?;
        if !duration.is_finite() || duration < 0.0 {
            return Err(TraceError::malformed(
                path,
                line_no,
                format!(
                    "column duration: expected non-negative seconds, found {:?}",
                    parts[1]
                ),
            ));
        }
        let gpus: u32 = number(
            path,
            line_no,
            "num_gpus",
            parts[2],
            "a whole number of GPUs",
        )?;
        let cluster = parts[4].trim();
        if cluster.is_empty() {
            return Err(TraceError::malformed(
                path,
                line_no,
                "column cluster: expected a virtual cluster id, found nothing",
            ));
        }
        jobs.push(TraceJob {
            line: line_no,
            submit_s: submit,
            duration_s: duration.max(1.0),
            gpus,
            key: cluster.to_string(),
        });
    }
    let first = jobs
        .iter()
        .map(|j| j.submit_s)
        .fold(f64::INFINITY, f64::min);
    for job in &mut jobs {
        job.submit_s -= first;
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsorted_rows_become_relative_to_the_earliest() {
        let text = format!(
            "{HEADER}\n2017-10-09 07:01:55,66.0,1,66.0,aa\n2017-10-09 06:01:55,10.0,8,80.0,bb\n"
        );
        let jobs = parse(Path::new("t.csv"), &text).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].submit_s, 3600.0);
        assert_eq!(jobs[1].submit_s, 0.0);
        assert_eq!((jobs[1].gpus, jobs[1].key.as_str()), (8, "bb"));
    }

    #[test]
    fn malformed_rows_name_line_and_column() {
        let text = format!(
            "{HEADER}\n2017-10-09 07:01:55,66.0,1,66.0,aa\n2017-10-09 07:01:55,abc,1,1,aa\n"
        );
        let err = parse(Path::new("t.csv"), &text).unwrap_err().to_string();
        assert!(err.starts_with("t.csv:3: column duration"), "{err}");
        let err = parse(Path::new("t.csv"), "when,what\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.csv:1: expected the header"), "{err}");
        let err = parse(Path::new("t.csv"), &format!("{HEADER}\n2017-10-09,1,1,1\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("t.csv:2: expected 5"), "{err}");
    }
}
