//! A real Prometheus server (built from its Go module, [`Tool::Prometheus`]) scraping gpufair's
//! processes and evaluating rule files, for the end-to-end cases that check the shipped alerts
//! against what the binaries really export. It listens on a loopback port of its own choosing,
//! keeps its data in a temporary directory, and is killed on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::tools::{Tool, ToolError};

#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error(transparent)]
    Tool(#[from] ToolError),
    #[error("prometheus: {0}")]
    Setup(String),
    #[error("prometheus API {path}: {message}")]
    Api { path: String, message: String },
}

/// One scrape job: its name and the `host:port` targets it scrapes at `/metrics`.
#[derive(Debug, Clone)]
pub struct ScrapeJob {
    pub name: String,
    pub targets: Vec<String>,
}

/// A running Prometheus.
pub struct PrometheusServer {
    child: Child,
    address: String,
    dir: tempfile::TempDir,
}

/// The configuration: every job scraped and every rule evaluated once a second, so a case sees
/// a rule's `for` run out in seconds.
fn config(jobs: &[ScrapeJob]) -> Value {
    json!({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": jobs.iter().map(|job| json!({
            "job_name": job.name,
            "static_configs": [{"targets": job.targets}],
        })).collect::<Vec<_>>(),
    })
}

/// The address Prometheus's web server bound, from its log line
/// `... msg="Listening on" component=web address=127.0.0.1:PORT` (the line before it, "Start
/// listening for connections", gives the address asked for: port 0).
fn listen_address(log: &str) -> Option<String> {
    log.lines()
        .filter(|line| line.contains("msg=\"Listening on\""))
        .find_map(|line| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix("address="))
        })
        .map(|a| a.trim_matches('"').to_string())
}

impl PrometheusServer {
    /// Starts Prometheus scraping `jobs` and evaluating the rule file `rules_yaml`, and waits
    /// until it answers `/-/ready`.
    pub async fn start(jobs: &[ScrapeJob], rules_yaml: &str) -> Result<Self, PrometheusError> {
        let binary = Tool::Prometheus.locate()?;
        let dir = tempfile::tempdir().map_err(|e| setup(format!("temporary directory: {e}")))?;
        let config_path = dir.path().join("prometheus.yml");
        let config_text = serde_yaml::to_string(&config(jobs))
            .map_err(|e| setup(format!("config as YAML: {e}")))?;
        write(&config_path, &config_text)?;
        write(&dir.path().join("rules.yaml"), rules_yaml)?;
        let log_path = dir.path().join("prometheus.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| setup(format!("{}: {e}", log_path.display())))?;
        let mut child = Command::new(&binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0")
            .arg("--log.level=info")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| setup(format!("could not start {}: {e}", binary.display())))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let address = loop {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            if let Some(address) = listen_address(&log) {
                break address;
            }
            if tokio::time::Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
                let _ = child.kill();
                return Err(setup(format!("it never started listening:\n{log}")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let server = PrometheusServer {
            child,
            address,
            dir,
        };
        while !matches!(server.get("/-/ready").await, Ok((200, _))) {
            if tokio::time::Instant::now() > deadline {
                return Err(setup(format!("it never became ready:\n{}", server.log())));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(server)
    }

    /// Its log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path` on its HTTP API: the status code and the body.
    async fn get(&self, path: &str) -> Result<(u16, Bytes), PrometheusError> {
        let api = |message: String| PrometheusError::Api {
            path: path.to_string(),
            message,
        };
        let tcp = tokio::net::TcpStream::connect(&self.address)
            .await
            .map_err(|e| api(format!("connect to {}: {e}", self.address)))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| api(format!("handshake: {e}")))?;
        tokio::spawn(connection);
        let request = http::Request::get(path)
            .header(http::header::HOST, &self.address)
            .body(Empty::<Bytes>::new())
            .map_err(|e| api(format!("request: {e}")))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| api(format!("send: {e}")))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| api(format!("body: {e}")))?
            .to_bytes();
        Ok((status, body))
    }

    /// `GET /api/v1/<endpoint>?<query>` and its `data`, failing on any status but `success`.
    async fn api(&self, endpoint: &str, query: &[(&str, &str)]) -> Result<Value, PrometheusError> {
        let encoded: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(query)
            .finish();
        let path = format!("/api/v1/{endpoint}?{encoded}");
        let (status, body) = self.get(&path).await?;
        let value: Value = serde_json::from_slice(&body).map_err(|e| PrometheusError::Api {
            path: path.clone(),
            message: format!(
                "HTTP {status}, not JSON ({e}): {}",
                String::from_utf8_lossy(&body)
            ),
        })?;
        if value["status"] != "success" {
            return Err(PrometheusError::Api {
                path,
                message: format!("HTTP {status}: {value}"),
            });
        }
        Ok(value["data"].clone())
    }

    /// An instant query's result vector: each sample's labels and value.
    pub async fn query(&self, promql: &str) -> Result<Vec<(Value, f64)>, PrometheusError> {
        let data = self.api("query", &[("query", promql)]).await?;
        Ok(data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|sample| {
                let value = sample["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN);
                (sample["metric"].clone(), value)
            })
            .collect())
    }

    /// The alerts now pending or firing (`/api/v1/alerts`).
    pub async fn alerts(&self) -> Result<Vec<Value>, PrometheusError> {
        let data = self.api("alerts", &[]).await?;
        Ok(data["alerts"].as_array().cloned().unwrap_or_default())
    }

    /// The scrape targets and their health (`/api/v1/targets`, active ones).
    pub async fn targets(&self) -> Result<Vec<Value>, PrometheusError> {
        let data = self.api("targets", &[("state", "active")]).await?;
        Ok(data["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The rule groups as loaded, with each rule's last evaluation error if any (`/api/v1/rules`).
    pub async fn rule_groups(&self) -> Result<Vec<Value>, PrometheusError> {
        let data = self.api("rules", &[]).await?;
        Ok(data["groups"].as_array().cloned().unwrap_or_default())
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Grafana's variables as a query would have them after Grafana interpolates them.
pub fn grafana_interpolated(query: &str) -> String {
    query
        .replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h")
        .replace("$queue", ".*")
}

/// Every query of a Grafana dashboard, with where it is: panel targets (rows' panels too) and
/// query variables.
pub fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    fn panels(list: &Value, out: &mut Vec<(String, String)>) {
        for panel in list.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("?").to_string();
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push((title.clone(), expr.to_string()));
                }
            }
            panels(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&dashboard["panels"], &mut out);
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] == "query" {
            let query = variable["query"]["query"]
                .as_str()
                .or(variable["query"].as_str())
                .unwrap_or_default();
            // label_values(metric, label) is Grafana's, not PromQL: its metric is the query.
            let metric = query
                .strip_prefix("label_values(")
                .and_then(|rest| rest.split(',').next())
                .unwrap_or(query);
            out.push((format!("variable {}", variable["name"]), metric.to_string()));
        }
    }
    out
}

fn setup(message: String) -> PrometheusError {
    PrometheusError::Setup(message)
}

fn write(path: &Path, text: &str) -> Result<(), PrometheusError> {
    std::fs::write(path, text).map_err(|e| setup(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listen_address_is_read_from_the_log() {
        let log = "time=2026-12-02T05:00:00.000Z level=INFO source=web.go:731 msg=\"Start listening for connections\" component=web address=127.0.0.1:0\n\
                   time=2026-12-02T05:00:00.001Z level=INFO source=tls_config.go:395 msg=\"Listening on\" component=web address=127.0.0.1:41234\n";
        assert_eq!(listen_address(log).as_deref(), Some("127.0.0.1:41234"));
        assert_eq!(listen_address("msg=\"Server is ready\"\n"), None);
    }

    #[test]
    fn every_job_is_scraped_and_every_rule_evaluated_each_second() {
        let config = config(&[ScrapeJob {
            name: "gpufair-webhook".into(),
            targets: vec!["127.0.0.1:1".into()],
        }]);
        assert_eq!(config["global"]["evaluation_interval"], "1s");
        assert_eq!(
            config["scrape_configs"][0]["static_configs"][0]["targets"][0],
            "127.0.0.1:1"
        );
        assert_eq!(config["rule_files"][0], "rules.yaml");
    }
}
