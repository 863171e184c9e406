//! End-to-end tests: real `gpufair-webhook serve` replicas (admission and controller) and real
//! `gpufair-device-plugin`s with fake GPUs, as separate processes, against a real control plane
//! (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok nodes).
//!
//! Each case starts its own control plane and processes, since gpufair is cluster-wide (its
//! CRDs, webhook configuration and Lease), and several cases run at once: they spend most of
//! their time waiting on the clock (pods that run for seconds, leases that expire), so running
//! them side by side keeps the suite short on two cores. `GPUFAIR_E2E_PARALLEL` cases run at a
//! time (default 4: each control plane is five processes). Hence `harness = false` and this
//! small runner: `cargo test -p gpufair-integration --test end_to_end [FILTER...]` runs the
//! cases whose names contain a filter (all without one), prints each one's result and wall
//! time, and fails if any failed.

mod burst;
mod common;
mod engines;
mod fail_safe;
mod failover;
mod faults;
mod gang;
mod guarantees;
mod guards;
mod helm;
mod hold_placement;
mod holds;
mod install;
mod kubectl_plugin;
mod ledger;
mod mig;
mod monitoring;
mod outages;
mod preemption;
mod release;
mod stock_scheduler;
mod storm;
mod try_it;
mod weights;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

type CaseFuture = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

struct Case {
    name: &'static str,
    run: fn() -> CaseFuture,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "release::one_gpu_pod_is_gated_then_released_and_bound_within_2s",
            run: || Box::pin(release::one_gpu_pod_is_gated_then_released_and_bound_within_2s()),
        },
        Case {
            name: "burst::burst_of_100_is_released_faster_than_the_sustained_rate",
            run: || Box::pin(burst::burst_of_100_is_released_faster_than_the_sustained_rate()),
        },
        Case {
            name: "gang::gang_is_released_whole_only_once_all_members_fit",
            run: || Box::pin(gang::gang_is_released_whole_only_once_all_members_fit()),
        },
        Case {
            name: "weights::weights_2_to_1_on_12_gpus_settle_at_8_to_4",
            run: || Box::pin(weights::weights_2_to_1_on_12_gpus_settle_at_8_to_4()),
        },
        Case {
            name: "mig::media_and_compute_instance_slices_are_charged_one_seventh_of_a_gpu",
            run: || {
                Box::pin(mig::media_and_compute_instance_slices_are_charged_one_seventh_of_a_gpu())
            },
        },
        Case {
            name: "monitoring::prometheus_fires_the_minimum_weight_and_wait_alerts_on_a_starved_queue",
            run: || {
                Box::pin(
                    monitoring::prometheus_fires_the_minimum_weight_and_wait_alerts_on_a_starved_queue(),
                )
            },
        },
        Case {
            name: "preemption::queue_below_guarantee_evicts_a_whole_victim_with_events",
            run: || Box::pin(preemption::queue_below_guarantee_evicts_a_whole_victim_with_events()),
        },
        Case {
            name: "preemption::budget_blocking_the_first_victim_never_half_evicts_a_gang",
            run: || {
                Box::pin(preemption::budget_blocking_the_first_victim_never_half_evicts_a_gang())
            },
        },
        Case {
            name: "stock_scheduler::kube_scheduler_never_preempts_a_managed_pod",
            run: || Box::pin(stock_scheduler::kube_scheduler_never_preempts_a_managed_pod()),
        },
        Case {
            name: "preemption::budget_allowing_one_pod_never_half_evicts_a_two_pod_gang",
            run: || {
                Box::pin(preemption::budget_allowing_one_pod_never_half_evicts_a_two_pod_gang())
            },
        },
        Case {
            name: "ledger::controller_restart_keeps_the_queue_ledger",
            run: || Box::pin(ledger::controller_restart_keeps_the_queue_ledger()),
        },
        Case {
            name: "holds::controller_restart_keeps_a_holds_idle_budget",
            run: || Box::pin(holds::controller_restart_keeps_a_holds_idle_budget()),
        },
        Case {
            name: "holds::a_hold_given_up_is_stored_with_its_blocker_and_when_across_a_restart",
            run: || {
                Box::pin(
                    holds::a_hold_given_up_is_stored_with_its_blocker_and_when_across_a_restart(),
                )
            },
        },
        Case {
            name: "holds::backfill_runs_in_a_holds_idle_capacity_until_the_node_drains",
            run: || Box::pin(holds::backfill_runs_in_a_holds_idle_capacity_until_the_node_drains()),
        },
        Case {
            name: "holds::processing_runs_in_a_holds_idle_capacity_by_default",
            run: || Box::pin(holds::processing_runs_in_a_holds_idle_capacity_by_default()),
        },
        Case {
            name: "holds::realtime_work_runs_in_a_holds_idle_capacity",
            run: || Box::pin(holds::realtime_work_runs_in_a_holds_idle_capacity()),
        },
        Case {
            name: "failover::killed_leader_is_replaced_within_15s_and_nothing_is_released_twice",
            run: || {
                Box::pin(
                    failover::killed_leader_is_replaced_within_15s_and_nothing_is_released_twice(),
                )
            },
        },
        Case {
            name: "faults::controller_recovers_from_each_injected_fault",
            run: || Box::pin(faults::controller_recovers_from_each_injected_fault()),
        },
        Case {
            name: "outages::apiserver_killed_mid_burst_releases_nothing_twice",
            run: || Box::pin(outages::apiserver_killed_mid_burst_releases_nothing_twice()),
        },
        Case {
            name: "outages::etcd_restarted_mid_burst_releases_nothing_twice",
            run: || Box::pin(outages::etcd_restarted_mid_burst_releases_nothing_twice()),
        },
        Case {
            name: "outages::leader_killed_mid_burst_releases_nothing_twice",
            run: || Box::pin(outages::leader_killed_mid_burst_releases_nothing_twice()),
        },
        Case {
            name: "storm::ten_leader_kills_release_nothing_twice_and_keep_the_ledger",
            run: || Box::pin(storm::ten_leader_kills_release_nothing_twice_and_keep_the_ledger()),
        },
        Case {
            name: "engines::same_scenario_through_the_binaries_and_the_simulator_agrees",
            run: || {
                Box::pin(engines::same_scenario_through_the_binaries_and_the_simulator_agrees())
            },
        },
        Case {
            name: "engines::tiers_urgency_and_deadlines_order_starts_the_same_in_both_engines",
            run: || {
                Box::pin(
                    engines::tiers_urgency_and_deadlines_order_starts_the_same_in_both_engines(),
                )
            },
        },
        Case {
            name: "helm::install_upgrade_and_uninstall_with_the_real_helm",
            run: || Box::pin(helm::install_upgrade_and_uninstall_with_the_real_helm()),
        },
        Case {
            name: "guarantees::a_guarantee_does_not_serve_a_pod_larger_than_itself_first",
            run: || {
                Box::pin(guarantees::a_guarantee_does_not_serve_a_pod_larger_than_itself_first())
            },
        },
        Case {
            name: "hold_placement::a_gang_is_held_on_free_room_wherever_the_pool_has_it",
            run: || {
                Box::pin(hold_placement::a_gang_is_held_on_free_room_wherever_the_pool_has_it())
            },
        },
        Case {
            name: "guards::the_api_server_enforces_the_shipped_policies",
            run: || Box::pin(guards::the_api_server_enforces_the_shipped_policies()),
        },
        Case {
            name: "fail_safe::with_the_webhook_down_cpu_pods_pass_and_every_gpu_form_is_refused",
            run: || {
                Box::pin(
                    fail_safe::with_the_webhook_down_cpu_pods_pass_and_every_gpu_form_is_refused(),
                )
            },
        },
        Case {
            name: "install::base_and_every_overlay_apply_server_side_dry_run",
            run: || Box::pin(install::base_and_every_overlay_apply_server_side_dry_run()),
        },
        Case {
            name: "install::gpufair_certs_rotates_the_real_secret_and_ca_bundle_while_admission_goes_on",
            run: || {
                Box::pin(
                    install::gpufair_certs_rotates_the_real_secret_and_ca_bundle_while_admission_goes_on(),
                )
            },
        },
        Case {
            name: "kubectl_plugin::kubectl_gpufair_explains_a_gated_pod_from_queue_status",
            run: || {
                Box::pin(kubectl_plugin::kubectl_gpufair_explains_a_gated_pod_from_queue_status())
            },
        },
        Case {
            name: "try_it::gpufair_try_shows_waits_with_reasons_and_releases",
            run: || Box::pin(try_it::gpufair_try_shows_waits_with_reasons_and_releases()),
        },
    ]
}

/// No case may take longer than this once it has started...
const CASE_TIMEOUT: Duration = Duration::from_secs(150);
/// ...except these, which run through many rounds on purpose.
const LONGER_CASES: &[(&str, Duration)] = &[
    ("faults::", Duration::from_secs(300)),
    ("storm::", Duration::from_secs(600)),
];

fn timeout_of(case: &str) -> Duration {
    LONGER_CASES
        .iter()
        .find(|(prefix, _)| case.starts_with(prefix))
        .map_or(CASE_TIMEOUT, |(_, timeout)| *timeout)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filters: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected: Vec<Case> = cases()
        .into_iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.name.contains(f)))
        .collect();
    if args.iter().any(|a| a == "--list") {
        for case in &selected {
            println!("{}: test", case.name);
        }
        return;
    }
    // Build the binaries before any case starts, so no case waits on a build inside the runtime.
    if let Err(error) = common::binaries() {
        println!(
            "\nthe end-to-end cases cannot run: {error:#}\n\ntest result: FAILED. 0 passed; {} failed",
            selected.len()
        );
        std::process::exit(101);
    }
    let parallel: usize = std::env::var("GPUFAIR_E2E_PARALLEL")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(4);
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(parallel));
    println!(
        "\nrunning {} end-to-end cases, {parallel} at a time",
        selected.len()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(8)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let started = Instant::now();
    let mut results = runtime.block_on(async {
        let handles: Vec<_> = selected
            .iter()
            .map(|case| {
                let future = (case.run)();
                let timeout = timeout_of(case.name);
                let slots = std::sync::Arc::clone(&slots);
                tokio::spawn(async move {
                    let _slot = slots.acquire_owned().await;
                    let begun = Instant::now();
                    let outcome = match tokio::time::timeout(timeout, future).await {
                        Ok(result) => result,
                        Err(_) => Err(anyhow::anyhow!("timed out after {timeout:?}")),
                    };
                    (outcome, begun.elapsed())
                })
            })
            .collect();
        let mut results = Vec::new();
        for (case, handle) in selected.iter().zip(handles) {
            let result = match handle.await {
                Ok(result) => result,
                Err(error) => (
                    Err(anyhow::anyhow!("panicked: {}", panic_message(error))),
                    Duration::ZERO,
                ),
            };
            let (outcome, elapsed) = &result;
            match outcome {
                Ok(()) => println!("test {} ... ok ({:.1}s)", case.name, elapsed.as_secs_f64()),
                Err(_) => println!(
                    "test {} ... FAILED ({:.1}s)",
                    case.name,
                    elapsed.as_secs_f64()
                ),
            }
            results.push((case.name, result));
        }
        results
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    if filters.is_empty() {
        match common::compare_with_grants() {
            Ok(report) => println!("\nRBAC, from the API server's audit logs:\n{report}"),
            Err(error) => results.push((
                "rbac::gpufair_accounts_use_only_what_deploy_grants",
                (Err(error), Duration::ZERO),
            )),
        }
    }
    let failed: Vec<_> = results
        .iter()
        .filter_map(|(name, (outcome, _))| outcome.as_ref().err().map(|e| (name, e)))
        .collect();
    for (name, error) in &failed {
        // The chain of causes without a backtrace: a case's context (logs) says where.
        println!("\n---- {name} ----\n{error}");
        for cause in error.chain().skip(1) {
            println!("  caused by: {cause}");
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; finished in {:.1}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        results.len() - failed.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        std::process::exit(101);
    }
}

fn panic_message(error: tokio::task::JoinError) -> String {
    match error.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into()),
        Err(error) => error.to_string(),
    }
}
