//! The founding case: a 60-GPU job of a team with little history behind a stream of small jobs.

mod common;

use common::{bundled, run};
use gpufair_sim::scenario::PolicyName;

const JOB: &str = "llm-posttrain";

#[test]
fn gpufair_starts_the_large_job_within_an_hour_and_stateless_never_does() {
    let scenario = bundled("seed-llm-vs-vision.yaml");
    let gpufair = run(&scenario, PolicyName::Gpufair).report;
    let job = &gpufair.named_jobs[JOB];
    assert_eq!(job.gpus, 60);
    let start = job.start_s.expect("gpufair starts the 60-GPU job");
    assert!(
        start - job.submit_s <= 3600.0,
        "waited {}s",
        start - job.submit_s
    );
    // It runs its 12 hours to completion without being evicted.
    assert_eq!(job.preemptions, 0);
    assert!(job.end_s.is_some());

    // Stateless fair share releases whatever fits: vision's small jobs take every freed GPU and
    // the 60-GPU job never gets a chance in three days, although LLM is entitled to it.
    let stateless = run(&scenario, PolicyName::Stateless).report;
    assert_eq!(stateless.named_jobs[JOB].start_s, None);
    let llm = &stateless.queues["llm"];
    assert!(llm.received_gpu_hours < 0.3 * llm.entitled_gpu_hours);
    assert!(stateless.fairness_deviation > 3.0 * gpufair.fairness_deviation);

    // FIFO lets later small jobs pass too, so it does no better.
    let fifo = run(&scenario, PolicyName::Fifo).report;
    assert_eq!(fifo.named_jobs[JOB].start_s, None);
}

#[test]
fn holding_and_the_ledger_together_unblock_the_job() {
    let scenario = bundled("seed-llm-vs-vision.yaml");
    // Without holds nothing keeps the freed GPUs from vision's stream.
    let nohold = run(&scenario, PolicyName::GpufairNoHold).report;
    assert_eq!(nohold.named_jobs[JOB].start_s, None);
    // Holds without history: 60 GPUs on top of LLM's running jobs is more than its
    // instantaneous share, so the hold is earned only once LLM's own small jobs happen to have
    // ended (after about seven hours here), if at all.
    let hold = run(&scenario, PolicyName::StatelessHold).report;
    let without_history = &hold.named_jobs[JOB];
    assert!(
        without_history
            .start_s
            .is_none_or(|start| start - without_history.submit_s > 4.0 * 3600.0),
        "{without_history:?}"
    );
    // With the ledger, what LLM is owed while it waits earns the hold within the hour.
    let gpufair = run(&scenario, PolicyName::Gpufair).report;
    let job = &gpufair.named_jobs[JOB];
    let wait = job.start_s.expect("gpufair starts the job") - job.submit_s;
    assert!(wait <= 3600.0, "started {wait} s after submission");
    assert!(job.end_s.is_some(), "and it finishes");
}
