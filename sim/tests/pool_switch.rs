//! The per-pool switch: a pool with time-aware sharing off is divided exactly as the stateless
//! policy divides it, while the pool beside it keeps gpufair's behaviour.

mod common;

use common::{bundled, run};
use gpufair_sim::scenario::PolicyName;

#[test]
fn a_pool_with_time_aware_sharing_off_is_the_stateless_policy_there() {
    let scenario = bundled("pool-switch.yaml");
    let gpufair = run(&scenario, PolicyName::Gpufair).report;
    let stateless = run(&scenario, PolicyName::Stateless).report;

    // The pool with it off: every queue's numbers are the stateless policy's, to the second.
    for queue in ["llm-batch", "vision-batch"] {
        assert_eq!(
            gpufair.queues[queue], stateless.queues[queue],
            "{queue} under gpufair differs from stateless"
        );
    }
    let batch_job = &gpufair.named_jobs["batch-posttrain"];
    assert_eq!(batch_job, &stateless.named_jobs["batch-posttrain"]);
    assert_eq!(
        batch_job.start_s, None,
        "stateless fair share starves the 60-GPU job"
    );

    // The pool with it on: gpufair, not stateless, so the same case comes out differently.
    let held = &gpufair.named_jobs["llm-posttrain"];
    let start = held.start_s.expect("gpufair starts the 60-GPU job");
    assert!(
        start - held.submit_s <= 3600.0,
        "started {:.0} s after submission",
        start - held.submit_s
    );
    assert_eq!(stateless.named_jobs["llm-posttrain"].start_s, None);
    assert_ne!(gpufair.queues["llm"], stateless.queues["llm"]);
}
