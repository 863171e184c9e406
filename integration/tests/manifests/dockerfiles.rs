//! The rules the images rely on, read from `docker/*.Dockerfile` (CI also runs hadolint on
//! them): one image per binary the manifests run, a separate build stage, every base image
//! tagged with a version, a final stage that is distroless and runs as a non-root user with an
//! exec-form entrypoint of the binary the name promises.

use std::collections::BTreeSet;

use super::{KUSTOMIZATIONS, rendered, repo_dir};

struct Stage {
    image: String,
    lines: Vec<String>,
}

fn stages(text: &str) -> Vec<Stage> {
    let mut stages: Vec<Stage> = Vec::new();
    let mut joined = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        joined.push_str(line.trim_end_matches('\\'));
        joined.push(' ');
        if line.ends_with('\\') {
            continue;
        }
        let instruction = std::mem::take(&mut joined).trim().to_string();
        if let Some(rest) = instruction.strip_prefix("FROM ") {
            let image = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            stages.push(Stage {
                image,
                lines: Vec::new(),
            });
        } else if let Some(stage) = stages.last_mut() {
            stage.lines.push(instruction);
        }
    }
    stages
}

#[test]
fn one_image_per_binary_the_manifests_run() {
    let mut images = BTreeSet::new();
    for kustomization in KUSTOMIZATIONS {
        for object in rendered(kustomization) {
            let text = serde_json::to_string(&object).unwrap();
            for part in text.split("ghcr.io/gpufair/").skip(1) {
                images.insert(part.split(':').next().unwrap().to_string());
            }
        }
    }
    let dockerfiles: BTreeSet<String> = std::fs::read_dir(repo_dir().join("docker"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".Dockerfile").map(str::to_string)
        })
        .collect();
    assert_eq!(images, dockerfiles);
}

#[test]
fn dockerfiles_build_in_stages_and_run_non_root() {
    for entry in std::fs::read_dir(repo_dir().join("docker")).unwrap() {
        let path = entry.unwrap().path();
        let binary = path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".Dockerfile")
            .to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let stages = stages(&text);
        let file = path.display();
        assert!(stages.len() >= 2, "{file}: a build stage and a run stage");
        for stage in &stages {
            let (_, tag) = stage
                .image
                .rsplit_once(':')
                .unwrap_or_else(|| panic!("{file}: {} has no tag", stage.image));
            assert!(
                tag != "latest" && !tag.is_empty(),
                "{file}: {} is not pinned",
                stage.image
            );
        }
        let build = &stages[0];
        assert!(
            build
                .lines
                .iter()
                .any(|l| l.contains("cargo build --release --locked")
                    && l.contains(&format!("--bin {binary}"))),
            "{file}: builds {binary} from the lock file"
        );
        let run = stages.last().unwrap();
        assert!(
            run.image.starts_with("gcr.io/distroless/"),
            "{file}: distroless run stage"
        );
        let user = run
            .lines
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix("USER "))
            .unwrap_or_else(|| panic!("{file}: the run stage sets USER"));
        let uid = user.split(':').next().unwrap();
        assert!(
            uid != "0" && uid != "root" && !uid.is_empty(),
            "{file}: USER {user}"
        );
        assert!(
            uid.parse::<u32>().is_ok(),
            "{file}: numeric USER, so runAsNonRoot can verify it"
        );
        assert!(
            run.lines
                .iter()
                .any(|l| l == &format!("ENTRYPOINT [\"/usr/local/bin/{binary}\"]")),
            "{file}: exec-form ENTRYPOINT of {binary}"
        );
        assert!(
            !stages
                .iter()
                .flat_map(|s| &s.lines)
                .any(|l| l.starts_with("ADD ")),
            "{file}: COPY, not ADD"
        );
    }
}

#[test]
fn pods_match_the_images_non_root_read_only_design() {
    for kustomization in KUSTOMIZATIONS {
        for object in rendered(kustomization) {
            let pod = match object["kind"].as_str() {
                Some("Deployment" | "DaemonSet" | "Job") => {
                    object["spec"]["template"]["spec"].clone()
                }
                Some("CronJob") => {
                    object["spec"]["jobTemplate"]["spec"]["template"]["spec"].clone()
                }
                _ => continue,
            };
            let name = object["metadata"]["name"].as_str().unwrap();
            for container in pod["containers"].as_array().unwrap() {
                let security = &container["securityContext"];
                assert_eq!(
                    security["readOnlyRootFilesystem"], true,
                    "{kustomization}: {name}"
                );
                assert_eq!(
                    security["allowPrivilegeEscalation"], false,
                    "{kustomization}: {name}"
                );
                assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
            }
            // Only the device plugin runs as root (kubelet's socket directory is root-only).
            if name != "gpufair-device-plugin" {
                assert_eq!(
                    pod["securityContext"]["runAsNonRoot"], true,
                    "{kustomization}: {name}"
                );
            }
        }
    }
}
