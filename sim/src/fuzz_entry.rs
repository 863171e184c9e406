//! Bodies of the fuzz targets that exercise this crate, behind a plain API so the same code runs
//! under libFuzzer (`fuzz/`, nightly) and in the stable replay of the kept corpus
//! (`tests/fuzz_corpus.rs`). Each body panics only when a promise is broken.

use std::path::Path;

use crate::scenario::model::TraceFormat;
use crate::scenario::{self, Scenario};
use crate::trace::{TraceError, TraceJob, helios, philly};

/// The head of the bundled Philly trace: what a fuzzed scenario's Philly `traces` entries read,
/// whatever file they name, so the file system stays out of fuzzing.
const PHILLY_HEAD: &str = "timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,1,2951.0,6214e9
2017-09-29 07:58:32,860662.0,1,860662.0,6c71a0
2017-10-09 06:13:36,2759.0,8,2759.0,6214e9
2017-10-09 07:00:41,64.0,2,64.0,11cb48
";

/// The head of the bundled Helios trace, for the same reason.
const HELIOS_HEAD: &str =
    "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status
0,1,1,1,1,0,84,0,Pass
1,1,1,1,1,94,87,0,Pass
3,2,1,1,1,107,30,0,Failed
4,3,8,40,1,28,656,0,Pass
5,4,0,1,1,83,2,0,Failed
7,5,1,1,1,10,2115,0,Killed
";

fn in_memory_trace(format: TraceFormat, path: &Path) -> Result<Vec<TraceJob>, TraceError> {
    match format {
        TraceFormat::Philly => philly::parse(path, PHILLY_HEAD),
        TraceFormat::Helios => helios::parse(path, HELIOS_HEAD),
    }
}

/// A scenario file: it parses or is refused with an error naming the file; an accepted one
/// holds together (every job in a known queue, with pods, submitted in order).
pub fn scenario(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz/scenario.yaml");
    match scenario::parse_with_traces(path, text, &in_memory_trace) {
        Ok(scenario) => check_scenario(&scenario),
        Err(err) => {
            let message = err.to_string();
            assert!(
                message.contains("fuzz/scenario.yaml"),
                "error does not name the file: {message}"
            );
        }
    }
}

fn check_scenario(scenario: &Scenario) {
    assert!(scenario.jobs.len() <= scenario::MAX_JOBS);
    assert!(scenario.duration_s.is_finite() && scenario.duration_s > 0.0);
    for pair in scenario.jobs.windows(2) {
        assert!(
            pair[0].submit_s <= pair[1].submit_s,
            "jobs out of order: {} then {}",
            pair[0].submit_s,
            pair[1].submit_s
        );
    }
    for job in &scenario.jobs {
        assert!(
            job.queue < scenario.queues.len(),
            "job in queue {}",
            job.queue
        );
        assert!(!job.pods.is_empty() && job.pods.iter().all(|&g| g > 0));
        assert!(job.duration_s.is_finite() && job.duration_s > 0.0);
    }
}

/// A Philly trace file (CSV).
pub fn philly_trace(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        check_trace(philly::parse(Path::new("philly.csv"), text));
    }
}

/// A Helios trace file (CSV).
pub fn helios_trace(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        check_trace(helios::parse(Path::new("helios.csv"), text));
    }
}

/// Accepted rows are relative to the earliest and last at least a second; refused files name
/// the file and line.
fn check_trace(result: Result<Vec<TraceJob>, TraceError>) {
    match result {
        Ok(jobs) => {
            for job in jobs {
                assert!(
                    job.submit_s.is_finite() && job.submit_s >= 0.0,
                    "line {}: submit {}",
                    job.line,
                    job.submit_s
                );
                assert!(
                    job.duration_s.is_finite() && job.duration_s >= 1.0,
                    "line {}: duration {}",
                    job.line,
                    job.duration_s
                );
            }
        }
        Err(TraceError::Malformed { line, .. }) => assert!(line >= 1),
        Err(TraceError::Io { .. }) => panic!("parsing text never reads a file"),
    }
}
