//! The per-pool switch: a pool with time-aware sharing off is divided as the stateless policy
//! divides it, while the pool beside it keeps gpufair's behaviour.

mod common;

use common::{bundled, run};
use gpufair_sim::scenario::PolicyName;

#[test]
fn a_pool_with_time_aware_sharing_off_is_the_stateless_policy_there() {
    let scenario = bundled("pool-switch.yaml");
    let gpufair = run(&scenario, PolicyName::Gpufair).report;
    let stateless = run(&scenario, PolicyName::Stateless).report;

    // The pool with it off: every queue's numbers are the stateless policy's. Decisions are
    // the same (core's `pool_settings` test checks that cycle by cycle); only the cycle times
    // differ, because the other pool's events run cycles at other moments, so a release can
    // come up to one cycle earlier or later.
    let cycle = scenario.cycle_s;
    for queue in ["llm-batch", "vision-batch"] {
        let (ours, theirs) = (&gpufair.queues[queue], &stateless.queues[queue]);
        assert_eq!(ours.jobs, theirs.jobs);
        assert!(
            (ours.entitled_gpu_hours - theirs.entitled_gpu_hours).abs()
                <= 1e-9 * theirs.entitled_gpu_hours
        );
        assert!(
            (ours.received_gpu_hours - theirs.received_gpu_hours).abs()
                <= 1e-3 * theirs.received_gpu_hours,
            "{queue}: received {} vs stateless {}",
            ours.received_gpu_hours,
            theirs.received_gpu_hours
        );
        for (a, b) in [
            (ours.wait_p50_s, theirs.wait_p50_s),
            (ours.wait_p99_s, theirs.wait_p99_s),
            (ours.wait_max_s, theirs.wait_max_s),
        ] {
            let (a, b) = (a.unwrap(), b.unwrap());
            assert!((a - b).abs() <= cycle, "{queue}: wait {a} vs stateless {b}");
        }
        assert_eq!(ours.starvation_events, theirs.starvation_events);
        assert!((ours.longest_starved_s - theirs.longest_starved_s).abs() <= cycle);
    }
    let batch_job = &gpufair.named_jobs["batch-posttrain"];
    assert_eq!(stateless.named_jobs["batch-posttrain"].start_s, None);
    assert_eq!(
        batch_job.start_s, None,
        "stateless fair share starves the 60-GPU job"
    );

    // The pool with it on: gpufair, not stateless, so the same case comes out differently.
    let held = &gpufair.named_jobs["llm-posttrain"];
    let start = held.start_s.expect("gpufair starts the 60-GPU job");
    assert!(
        start - held.submit_s <= 2.0 * 3600.0,
        "started {:.0} s after submission",
        start - held.submit_s
    );
    assert_eq!(stateless.named_jobs["llm-posttrain"].start_s, None);
    assert_ne!(gpufair.queues["llm"], stateless.queues["llm"]);
}
