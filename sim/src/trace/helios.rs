//! SenseTime Helios (`u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status`):
//! submit time is the running sum of `interval`; CPU-only jobs are skipped.

use std::path::Path;

use super::{TraceError, TraceJob, expect_header, fields, number, read_text};

pub const HEADER: &str =
    "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status";

pub fn read(path: &Path) -> Result<Vec<TraceJob>, TraceError> {
    let text = read_text(path)?;
    parse(path, &text)
}

pub fn parse(path: &Path, text: &str) -> Result<Vec<TraceJob>, TraceError> {
    let mut lines = text.lines();
    expect_header(path, lines.next(), HEADER)?;
    let mut jobs = Vec::new();
    let mut submit = 0.0_f64;
    for (index, line) in lines.enumerate() {
        let line_no = index + 2;
        if line.trim().is_empty() {
            continue;
        }
        let parts = fields(path, line_no, line, 9, HEADER)?;
        let user: u32 = number(path, line_no, "user", parts[1], "a numeric user id")?;
        let gpus: u32 = number(path, line_no, "gpu_num", parts[2], "a whole number of GPUs")?;
        let interval: f64 = number(path, line_no, "interval", parts[5], "seconds")?;
        let run_time: f64 = number(path, line_no, "run_time", parts[6], "seconds")?;
        if !interval.is_finite() || interval < 0.0 {
            return Err(TraceError::malformed(
                path,
                line_no,
                format!(
                    "column interval: expected non-negative seconds, found {:?}",
                    parts[5]
                ),
            ));
        }
        if !run_time.is_finite() || run_time < 0.0 {
            return Err(TraceError::malformed(
                path,
                line_no,
                format!(
                    "column run_time: expected non-negative seconds, found {:?}",
                    parts[6]
                ),
            ));
        }
        submit += interval;
        if gpus == 0 {
            continue;
        }
        jobs.push(TraceJob {
            line: line_no,
            submit_s: submit,
            duration_s: run_time.max(1.0),
            gpus,
            key: user.to_string(),
        });
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_is_running_sum_and_cpu_jobs_are_skipped() {
        let text = format!(
            "{HEADER}\n0,1,1,1,1,0,84,0,Pass\n1,2,0,4,1,10,5,0,Pass\n2,1,8,8,1,20,0,0,Failed\n"
        );
        let jobs = parse(Path::new("h.csv"), &text).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(
            (jobs[1].submit_s, jobs[1].gpus, jobs[1].duration_s),
            (30.0, 8, 1.0)
        );
        assert_eq!(jobs[1].key, "1");
    }

    #[test]
    fn bad_number_names_line_and_column() {
        let text = format!("{HEADER}\n0,x,1,1,1,0,84,0,Pass\n");
        let err = parse(Path::new("h.csv"), &text).unwrap_err().to_string();
        assert!(err.starts_with("h.csv:2: column user"), "{err}");
    }
}
