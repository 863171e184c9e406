//! The Helm chart (deploy/helm/gpufair) against deploy/'s kustomizations, with the real `helm`
//! built from its Go module (`gpufair_integration::tools`). One source of truth: for each
//! kustomization, the chart rendered with the values that say the same thing must give the same
//! objects, field by field, less Helm's bookkeeping labels and the Namespace (Helm's
//! `--create-namespace` makes it; the webhook skips it by name). Every values combination
//! passes `helm lint --strict`, and bad values fail the render naming the value.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use gpufair_integration::tools::Tool;
use serde_json::Value;

use super::{INSTALL_NAMESPACE, KUSTOMIZATIONS, find, kustomize, rendered, repo_dir, strict};

/// Labels Helm's release adds to every object of the chart; deploy/ has no release.
const HELM_LABELS: [&str; 4] = [
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "helm.sh/chart",
];

/// A values combination of the chart, and the kustomization that installs the same.
pub struct Combination {
    pub name: &'static str,
    /// A values file's text.
    pub values: &'static str,
    pub kustomization: Option<&'static str>,
}

pub const COMBINATIONS: &[Combination] = &[
    Combination {
        name: "defaults",
        values: "",
        kustomization: Some("base"),
    },
    Combination {
        name: "cert-manager",
        values: "certificates: { provider: cert-manager }\n",
        kustomization: Some("overlays/cert-manager"),
    },
    Combination {
        name: "dev",
        values: "dev: { fakeGpus: true }\n",
        kustomization: Some("overlays/dev"),
    },
    Combination {
        name: "mig",
        values: "devicePlugin: { migStrategy: mixed }\n",
        kustomization: Some("overlays/mig"),
    },
    Combination {
        name: "monitoring",
        values: "monitoring:\n  scrapeAnnotations: true\n  dashboard: true\n  prometheusRule: { enabled: true }\n",
        kustomization: Some("overlays/monitoring"),
    },
    Combination {
        name: "everything-changed",
        values: EVERYTHING_CHANGED,
        kustomization: None,
    },
];

/// Every value away from its default at once: what a platform team changes.
const EVERYTHING_CHANGED: &str = "
webhook:
  replicas: 3
  image: { repository: registry.example/gpufair-webhook, tag: 0.1.0-rc1, pullPolicy: Always }
  resources: { requests: { cpu: 200m, memory: 128Mi }, limits: { memory: 512Mi } }
  timeoutSeconds: 3
  podDisruptionBudget: { minAvailable: 2 }
  nodeSelector: { node-role.kubernetes.io/control-plane: \"\" }
  tolerations: [{ key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule }]
devicePlugin:
  image: { repository: registry.example/gpufair-device-plugin, tag: 0.1.0-rc1 }
  nodeSelector: { gpufair.io/device-plugin: \"true\" }
  migStrategy: mixed
certificates:
  provider: cert-manager
monitoring:
  scrapeAnnotations: true
  dashboard: true
  prometheusRule: { enabled: true, labels: { release: kube-prometheus-stack } }
config:
  fairshare: { window: 72h, decay: 0.8, decayPeriod: 12h, k: 2.0, minWeight: 0.2, bucket: 30m, chargeBasis: utilized }
  preemption: { enabled: false }
";

pub fn chart_dir() -> PathBuf {
    repo_dir().join("deploy/helm/gpufair")
}

/// `helm` with its configuration, cache and data kept apart from the user's.
pub fn helm() -> Command {
    let binary = Tool::Helm.locate().unwrap_or_else(|e| panic!("{e}"));
    let home = std::env::temp_dir().join(format!("gpufair-helm-home-{}", std::process::id()));
    let mut command = Command::new(binary);
    for (variable, dir) in [
        ("HELM_CONFIG_HOME", "config"),
        ("HELM_CACHE_HOME", "cache"),
        ("HELM_DATA_HOME", "data"),
    ] {
        command.env(variable, home.join(dir));
    }
    command
}

/// Writes `values` to a file `helm` reads with `-f`.
fn values_file(values: &str) -> tempfile::NamedTempFile {
    let file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temporary values file");
    std::fs::write(file.path(), values).expect("values file written");
    file
}

/// Runs `helm ARGS -f VALUES`; its stdout, or its stderr as the error.
fn run_helm(args: &[&str], values: &str) -> Result<String, String> {
    let file = values_file(values);
    let output = helm()
        .args(args)
        .arg("-f")
        .arg(file.path())
        .output()
        .expect("helm runs");
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "helm {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// `helm template` of the chart in the install namespace, CRDs included.
pub fn helm_template(values: &str) -> Result<Vec<Value>, String> {
    let chart = chart_dir().display().to_string();
    let text = run_helm(
        &[
            "template",
            "gpufair",
            &chart,
            "--namespace",
            INSTALL_NAMESPACE,
            "--include-crds",
        ],
        values,
    )?;
    let objects = kustomize::yaml_text_documents(&text)?;
    let mut seen = std::collections::BTreeSet::new();
    for object in &objects {
        if !seen.insert(kustomize::id(object)) {
            return Err(format!("{} is rendered twice", kustomize::id(object)));
        }
    }
    Ok(objects)
}

/// The chart's object less the labels of Helm's release, as deploy/ would have it.
fn without_release_labels(mut object: Value) -> Value {
    if let Some(labels) = object["metadata"]["labels"].as_object_mut() {
        for label in HELM_LABELS {
            labels.remove(label);
        }
    }
    object
}

/// Paths where `a` and `b` differ. Numbers are compared by value (`1.0` and `1`), and two
/// strings that differ as text but parse into the same YAML or JSON document (a config file in
/// a ConfigMap, written with comments in deploy/ and by `toYaml` in the chart) are the same.
pub fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                differences(
                    &format!("{path}.{key}"),
                    x.get(key).unwrap_or(&Value::Null),
                    y.get(key).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}[{i}]"), p, q, out);
            }
        }
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        (Value::String(x), Value::String(y)) if x != y => {
            let parse = |s: &str| {
                kustomize::yaml_text_documents(s)
                    .ok()
                    .filter(|d| d.len() == 1 && d[0].is_object())
            };
            match (parse(x), parse(y)) {
                (Some(p), Some(q)) => differences(&format!("{path}(parsed)"), &p[0], &q[0], out),
                _ => out.push(format!("{path}: {a} ≠ {b}")),
            }
        }
        _ if a == b => {}
        _ => out.push(format!("{path}: {a} ≠ {b}")),
    }
}

/// How the chart's rendering differs from the kustomization's: objects only one has, and every
/// field that differs.
fn compare(kustomization: &str, chart: Vec<Value>) -> Vec<String> {
    let by_id = |objects: Vec<Value>| -> BTreeMap<String, Value> {
        objects
            .into_iter()
            .map(|o| (kustomize::id(&o), o))
            .collect()
    };
    let mut deploy = by_id(rendered(kustomization));
    deploy.remove(&format!("Namespace//{INSTALL_NAMESPACE}"));
    let chart = by_id(chart.into_iter().map(without_release_labels).collect());
    let mut out = Vec::new();
    for (id, object) in &deploy {
        match chart.get(id) {
            None => out.push(format!("{id}: only in deploy/{kustomization}")),
            Some(rendered) => differences(id, object, rendered, &mut out),
        }
    }
    for id in chart.keys().filter(|id| !deploy.contains_key(*id)) {
        out.push(format!("{id}: only in the chart"));
    }
    out
}

#[test]
fn the_chart_renders_what_each_kustomization_renders() {
    for combination in COMBINATIONS {
        let Some(kustomization) = combination.kustomization else {
            continue;
        };
        let chart = helm_template(combination.values)
            .unwrap_or_else(|e| panic!("values {}: {e}", combination.name));
        let differences = compare(kustomization, chart);
        assert!(
            differences.is_empty(),
            "the chart with values {} differs from deploy/{kustomization}:\n{}",
            combination.name,
            differences.join("\n")
        );
    }
}

#[test]
fn every_kustomization_has_its_values_combination() {
    for kustomization in KUSTOMIZATIONS {
        assert!(
            COMBINATIONS
                .iter()
                .any(|c| c.kustomization == Some(kustomization)),
            "no values combination of the chart stands for deploy/{kustomization}"
        );
    }
}

/// The comparison itself finds a drift: one field changed in the chart's rendering is named.
#[test]
fn a_drift_is_named_by_its_path() {
    let mut chart = helm_template("").unwrap();
    let deployment = chart
        .iter_mut()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    deployment["spec"]["template"]["spec"]["containers"][0]["args"][1] =
        Value::String("--listen=0.0.0.0:9443".into());
    let differences = compare("base", chart);
    assert_eq!(
        differences,
        vec![
            "Deployment/gpufair-system/gpufair-webhook.spec.template.spec.containers[0].args[1]: \
             \"--listen=0.0.0.0:8443\" ≠ \"--listen=0.0.0.0:9443\""
                .to_string()
        ]
    );
}

#[test]
fn helm_lint_passes_for_every_values_combination() {
    let chart = chart_dir().display().to_string();
    for combination in COMBINATIONS {
        let output = run_helm(
            &["lint", "--strict", &chart, "--namespace", INSTALL_NAMESPACE],
            combination.values,
        )
        .unwrap_or_else(|e| panic!("values {}: {e}", combination.name));
        assert!(
            output.contains("1 chart(s) linted, 0 chart(s) failed"),
            "values {}: {output}",
            combination.name
        );
    }
}

/// Every combination renders into strictly valid objects whose config the binaries accept.
#[test]
fn every_values_combination_renders_valid_objects() {
    for combination in COMBINATIONS {
        let objects = helm_template(combination.values)
            .unwrap_or_else(|e| panic!("values {}: {e}", combination.name));
        let errors: Vec<String> = objects
            .iter()
            .filter_map(|o| strict::validate(o).err())
            .collect();
        assert!(
            errors.is_empty(),
            "values {}:\n{}",
            combination.name,
            errors.join("\n")
        );
        let config = find(&objects, "ConfigMap", "gpufair-config")["data"]["config.yaml"]
            .as_str()
            .expect("config.yaml");
        gpufair_api::Config::from_yaml(config, "the chart's config")
            .unwrap_or_else(|e| panic!("values {}: the config is refused: {e}", combination.name));
    }
}

/// The values reach the objects they name.
#[test]
fn changed_values_reach_their_objects() {
    let objects = helm_template(EVERYTHING_CHANGED).unwrap();
    let deployment = find(&objects, "Deployment", "gpufair-webhook");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        "registry.example/gpufair-webhook:0.1.0-rc1"
    );
    assert_eq!(pod["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(
        pod["containers"][0]["resources"]["limits"]["memory"],
        "512Mi"
    );
    assert_eq!(
        pod["nodeSelector"]["node-role.kubernetes.io/control-plane"],
        ""
    );
    assert_eq!(
        find(&objects, "PodDisruptionBudget", "gpufair-webhook")["spec"]["minAvailable"],
        2
    );
    let daemonset = find(&objects, "DaemonSet", "gpufair-device-plugin");
    let plugin = &daemonset["spec"]["template"]["spec"];
    assert_eq!(
        plugin["nodeSelector"],
        serde_json::json!({"gpufair.io/device-plugin": "true"})
    );
    assert_eq!(
        plugin["containers"][0]["securityContext"]["capabilities"]["add"],
        serde_json::json!(["SYS_ADMIN"])
    );
    let webhook = &find(&objects, "MutatingWebhookConfiguration", "gpufair")["webhooks"][0];
    assert_eq!(webhook["timeoutSeconds"], 3);
    assert_eq!(
        find(&objects, "PrometheusRule", "gpufair")["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert!(
        objects.iter().all(|o| o["kind"] != "Job"),
        "cert-manager replaces the certificate Job"
    );
    let config = find(&objects, "ConfigMap", "gpufair-config")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    let config = gpufair_api::Config::from_yaml(config, "the chart's config").unwrap();
    let text = format!("{config:?}");
    assert!(
        text.contains("Utilized") || text.contains("utilized"),
        "chargeBasis utilized reached the config: {text}"
    );
}

/// A value outside its accepted forms fails the render with a message naming it and them.
#[test]
fn bad_values_fail_naming_the_value_and_the_accepted_forms() {
    for (values, expected) in [
        (
            "certificates: { provider: vault }\n",
            "certificates.provider is \"vault\"; accepted: gpufair-certs, cert-manager",
        ),
        // values.schema.json: a misspelt key and a value of the wrong type.
        (
            "webhok: { replicas: 3 }\n",
            "additional properties 'webhok' not allowed",
        ),
        (
            "webhook: { replicas: two }\n",
            "at '/webhook/replicas': got string, want integer",
        ),
        (
            "webhook: { url: http://gpufair.example/mutate }\n",
            "webhook.url is \"http://gpufair.example/mutate\"; accepted: empty (the chart's Service), or an https:// URL",
        ),
        (
            "devicePlugin: { migStrategy: single }\n",
            "devicePlugin.migStrategy is \"single\"; accepted: none, mixed",
        ),
    ] {
        let error = helm_template(values).expect_err(values);
        assert!(error.contains(expected), "{values}: {error}");
    }
}

/// The commands of a README code block that start with `start`, continuation lines joined and
/// trailing comments dropped.
fn readme_commands(start: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(repo_dir().join("README.md")).unwrap();
    let mut commands = Vec::new();
    let mut current: Option<String> = None;
    for line in readme.lines() {
        let code = line.split(" #").next().unwrap_or(line).trim_end();
        let (code, continues) = match code.strip_suffix('\\') {
            Some(code) => (code.trim_end(), true),
            None => (code, false),
        };
        match current.as_mut() {
            Some(command) => {
                command.push(' ');
                command.push_str(code.trim());
            }
            None if code.starts_with(start) => current = Some(code.to_string()),
            None => continue,
        }
        if !continues {
            commands.extend(current.take());
        }
    }
    commands
}

/// Every `helm install` the README shows renders with the real helm (as `helm template`, with
/// the same arguments), and is the install the end-to-end case runs: release `gpufair`, the
/// install namespace, created by helm.
#[test]
fn the_readme_helm_installs_render() {
    let installs = readme_commands("helm install ");
    assert!(installs.len() >= 4, "README helm installs: {installs:?}");
    for install in &installs {
        assert!(
            install.starts_with(&format!(
                "helm install {} deploy/helm/gpufair --namespace {INSTALL_NAMESPACE} --create-namespace",
                gpufair_integration::cluster::helm::RELEASE
            )),
            "{install}"
        );
        let args: Vec<&str> = install
            .split_whitespace()
            .skip(2)
            .filter(|a| *a != "--create-namespace")
            .collect();
        let output = helm()
            .arg("template")
            .args(&args)
            .current_dir(repo_dir())
            .output()
            .expect("helm runs");
        assert!(
            output.status.success(),
            "{install}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // The kustomize commands name kustomizations the other tests render and dry-run apply.
    let applies = readme_commands("kubectl apply -k ");
    assert!(applies.len() >= 4, "README kustomize installs: {applies:?}");
    for apply in applies {
        let dir = apply.trim_start_matches("kubectl apply -k deploy/");
        assert!(KUSTOMIZATIONS.contains(&dir), "{apply}");
    }
}
