//! `gpufair-try` (the README's "Try it without a GPU cluster") runs to completion and prints
//! releases and waits with their reasons.

use std::process::Stdio;

use anyhow::{Context, ensure};

pub async fn gpufair_try_shows_waits_with_reasons_and_releases() -> anyhow::Result<()> {
    let binary = gpufair_integration::binary("gpufair-try");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(binary)
            .args(["--duration", "14s"])
            .stdin(Stdio::null())
            .output()
    })
    .await?
    .context("running gpufair-try")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success(),
        "gpufair-try failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let released = stdout
        .lines()
        .find(|l| l.contains(" released ") && l.contains("onto node"));
    ensure!(released.is_some(), "a release with its node:\n{stdout}");
    let waiting = stdout.lines().find(|l| {
        l.contains(" waiting ") && l.split_once(": ").is_some_and(|(_, why)| why.len() > 10)
    });
    ensure!(waiting.is_some(), "a wait with its reason:\n{stdout}");
    ensure!(
        stdout.contains("running ") && stdout.contains("finished "),
        "pods seen running and finishing:\n{stdout}"
    );
    ensure!(
        stdout
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("GPU-seconds received")),
        "ends with the summary:\n{stdout}"
    );
    println!(
        "  e.g. {}\n       {}",
        released.unwrap_or_default().trim(),
        waiting.unwrap_or_default().trim()
    );
    Ok(())
}
