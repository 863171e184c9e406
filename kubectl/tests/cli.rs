//! The binary's edges without a cluster: its help names the commands, and a kubeconfig that
//! does not exist is a plain error, not a panic.

use std::process::Command;

fn plugin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubectl-gpufair"))
}

#[test]
fn help_names_the_three_commands() {
    let output = plugin().arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    for command in ["queues", "pending", "why"] {
        assert!(text.contains(command), "{command} in:\n{text}");
    }
}

#[test]
fn a_missing_kubeconfig_is_a_plain_error() {
    let output = plugin()
        .args(["queues", "--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.starts_with("error: could not load the kubeconfig: /nonexistent/kubeconfig"),
        "{stderr}"
    );
}
