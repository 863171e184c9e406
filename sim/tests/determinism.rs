//! Same scenario and seed, same numbers; a different seed, different arrivals.

mod common;

use common::{bundled, repo_path};
use gpufair_sim::metrics::PolicyReport;
use gpufair_sim::report::json::to_json;
use gpufair_sim::runner::compare;
use gpufair_sim::scenario::{self, PolicyName, Scenario};

fn json(scenario: &Scenario) -> String {
    let policies = [PolicyName::Gpufair, PolicyName::Kai, PolicyName::KueueAfs];
    let comparison = compare(scenario, &policies, &|_| {}).expect("runs");
    let reports: Vec<&PolicyReport> = comparison.runs.iter().map(|r| &r.report).collect();
    to_json(scenario, &reports)
}

#[test]
fn same_seed_gives_identical_json() {
    let scenario = bundled("seed-llm-vs-vision.yaml");
    let first = json(&scenario);
    let again = json(&bundled("seed-llm-vs-vision.yaml"));
    assert_eq!(first, again);
    let value: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(value["policies"][0]["name"], "gpufair");
    assert_eq!(value["policies"].as_array().unwrap().len(), 3);
}

#[test]
fn another_seed_draws_other_arrivals() {
    let path = repo_path("scenarios/seed-llm-vs-vision.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let a = scenario::parse(&path, &text).unwrap();
    let b = scenario::parse(&path, &text.replace("seed: 42", "seed: 7")).unwrap();
    let submits = |s: &Scenario| s.jobs.iter().map(|j| j.submit_s).collect::<Vec<_>>();
    assert_ne!(submits(&a), submits(&b));
}
