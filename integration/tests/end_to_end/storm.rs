//! A short controller kill-and-restart storm (the full one is the `controller_storm` bench):
//! two replicas with a 1 s Lease, pods arriving and finishing throughout, the leader SIGKILLed
//! ten times at random points of its cycle or mid-burst and restarted. No pod is released
//! twice, no node is promised past capacity, every takeover is within 15 s, and each queue's
//! ledger matches the GPU-seconds its pods ran within what the kills may cost it.

use anyhow::ensure;
use gpufair_integration::storm::{self, StormOptions};

pub async fn ten_leader_kills_release_nothing_twice_and_keep_the_ledger() -> anyhow::Result<()> {
    let report = storm::run(StormOptions::short(10, 10)).await?;
    println!("{}", report.table());
    ensure!(
        report.violations.is_empty(),
        "the storm found violations:\n{}",
        report.table()
    );
    ensure!(
        report.kills.len() == 10,
        "{} kills made, not 10",
        report.kills.len()
    );
    ensure!(
        report.pods_run >= 10,
        "only {} pods ran: the storm did not exercise the controller",
        report.pods_run
    );
    Ok(())
}
