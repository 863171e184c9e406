//! Test support: a fake kubelet and a fake PodResources server, on Unix sockets in a directory
//! of the test's choosing. Used by this crate's tests, the end-to-end tests and the benchmark.
//!
//! The fake kubelet behaves as kubelet's device manager does inside `Register`: it checks the
//! version and resource name, dials the plugin's socket back, asks for its options and opens
//! ListAndWatch, recording every full device list.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::proto::deviceplugin::device_plugin_client::DevicePluginClient;
use crate::proto::deviceplugin::registration_server::{Registration, RegistrationServer};
use crate::proto::deviceplugin::{
    DevicePluginOptions, Empty, KUBELET_SOCKET, ListAndWatchResponse, RegisterRequest, VERSION,
};
use crate::proto::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use crate::proto::podresources::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};

pub type TestError = Box<dyn std::error::Error + Send + Sync>;

/// One accepted registration, with a client connected back to the plugin.
pub struct Registered {
    pub request: RegisterRequest,
    pub options: DevicePluginOptions,
    pub client: DevicePluginClient<Channel>,
    /// Every ListAndWatch message, in order.
    pub lists: mpsc::UnboundedReceiver<ListAndWatchResponse>,
}

impl Registered {
    /// The next full device list, or `None` if none arrives within `timeout`.
    pub async fn next_list(&mut self, timeout: Duration) -> Option<ListAndWatchResponse> {
        tokio::time::timeout(timeout, self.lists.recv())
            .await
            .ok()
            .flatten()
    }
}

struct RegistrationService {
    dir: PathBuf,
    out: mpsc::UnboundedSender<Registered>,
}

/// Kubelet's `IsExtendedResourceName`, as far as plugins can get it wrong.
fn valid_resource_name(name: &str) -> bool {
    match name.split_once('/') {
        Some((prefix, part)) => {
            !prefix.is_empty()
                && !name.contains("kubernetes.io/")
                && !name.starts_with("requests.")
                && !part.is_empty()
                && part.len() <= 63
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        }
        None => false,
    }
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let request = request.into_inner();
        if request.version != VERSION {
            return Err(Status::invalid_argument(format!(
                "unsupported version {:?}",
                request.version
            )));
        }
        if !valid_resource_name(&request.resource_name) {
            return Err(Status::invalid_argument(format!(
                "invalid resource name {:?}",
                request.resource_name
            )));
        }
        let socket = self.dir.join(&request.endpoint);
        let connect = DevicePluginClient::connect(format!("unix://{}", socket.display()));
        let mut client = tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .map_err(|_| Status::unavailable("dial back timed out"))?
            .map_err(|err| {
                Status::unavailable(format!("cannot dial {}: {err}", socket.display()))
            })?;
        let options = client
            .get_device_plugin_options(Empty {})
            .await?
            .into_inner();
        let mut stream = client.list_and_watch(Empty {}).await?.into_inner();
        let (tx, lists) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(list)) = stream.message().await {
                if tx.send(list).is_err() {
                    return;
                }
            }
        });
        let _ = self.out.send(Registered {
            request,
            options,
            client,
            lists,
        });
        Ok(Response::new(Empty {}))
    }
}

/// A kubelet Registration server on `<dir>/kubelet.sock`.
pub struct FakeKubelet {
    pub dir: PathBuf,
    registrations: mpsc::UnboundedReceiver<Registered>,
    out: mpsc::UnboundedSender<Registered>,
    stop: CancellationToken,
    server: Option<JoinHandle<()>>,
}

impl FakeKubelet {
    pub fn start(dir: &Path) -> Result<FakeKubelet, TestError> {
        let (out, registrations) = mpsc::unbounded_channel();
        let mut kubelet = FakeKubelet {
            dir: dir.to_path_buf(),
            registrations,
            out,
            stop: CancellationToken::new(),
            server: None,
        };
        kubelet.serve()?;
        Ok(kubelet)
    }

    /// (Re)creates `kubelet.sock` and serves Registration on it.
    fn serve(&mut self) -> Result<(), TestError> {
        let socket = self.dir.join(KUBELET_SOCKET);
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)?;
        self.stop = CancellationToken::new();
        let service = RegistrationService {
            dir: self.dir.clone(),
            out: self.out.clone(),
        };
        let shutdown = self.stop.clone().cancelled_owned();
        self.server = Some(tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(service))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
                .await;
        }));
        Ok(())
    }

    pub async fn next_registration(&mut self, timeout: Duration) -> Option<Registered> {
        tokio::time::timeout(timeout, self.registrations.recv())
            .await
            .ok()
            .flatten()
    }

    /// Waits for `count` registrations and returns them sorted by resource name.
    pub async fn registrations(
        &mut self,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<Registered>, TestError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut out = Vec::new();
        while out.len() < count {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_registration(left).await {
                Some(r) => out.push(r),
                None => {
                    return Err(format!(
                        "only {} of {count} registrations within {timeout:?}",
                        out.len()
                    )
                    .into());
                }
            }
        }
        out.sort_by(|a, b| a.request.resource_name.cmp(&b.request.resource_name));
        Ok(out)
    }

    /// Restarts like kubelet does: the server goes away, every socket in the directory is
    /// deleted (kubelet's `CleanupPluginDirectory`), then `kubelet.sock` is created again.
    pub async fn restart(&mut self) -> Result<(), TestError> {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
        }
        for entry in std::fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "sock") {
                let _ = std::fs::remove_file(path);
            }
        }
        self.serve()
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

struct PodResourcesService {
    response: Arc<Mutex<ListPodResourcesResponse>>,
}

#[tonic::async_trait]
impl PodResourcesLister for PodResourcesService {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        Ok(Response::new(self.response.lock().await.clone()))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        Ok(Response::new(AllocatableResourcesResponse::default()))
    }

    async fn get(
        &self,
        request: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        let request = request.into_inner();
        let response = self.response.lock().await;
        let pod = response
            .pod_resources
            .iter()
            .find(|p| p.name == request.pod_name && p.namespace == request.pod_namespace)
            .cloned()
            .ok_or_else(|| Status::not_found("pod not found"))?;
        Ok(Response::new(GetPodResourcesResponse {
            pod_resources: Some(pod),
        }))
    }
}

/// A PodResources server answering `List` with a canned response.
pub struct FakePodResources {
    pub response: Arc<Mutex<ListPodResourcesResponse>>,
    stop: CancellationToken,
}

impl FakePodResources {
    pub fn start(
        socket: &Path,
        response: ListPodResourcesResponse,
    ) -> Result<FakePodResources, TestError> {
        let _ = std::fs::remove_file(socket);
        let listener = UnixListener::bind(socket)?;
        let response = Arc::new(Mutex::new(response));
        let stop = CancellationToken::new();
        let service = PodResourcesService {
            response: Arc::clone(&response),
        };
        let shutdown = stop.clone().cancelled_owned();
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(PodResourcesListerServer::new(service))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
                .await;
        });
        Ok(FakePodResources { response, stop })
    }
}

impl Drop for FakePodResources {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A pod whose one container, `main`, holds `device` of `resource`, as PodResources lists it.
pub fn pod_holding(namespace: &str, name: &str, resource: &str, device: &str) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: vec![ContainerResources {
            name: "main".into(),
            devices: vec![ContainerDevices {
                resource_name: resource.into(),
                device_ids: vec![device.into()],
                topology: None,
            }],
            ..ContainerResources::default()
        }],
        ..PodResources::default()
    }
}

/// `GET path` over HTTP/1.1 on loopback (the plugin's metrics), retrying the connection for up
/// to `wait` while the server starts. Returns the whole response, headers included.
pub async fn http_get(port: u16, path: &str, wait: Duration) -> Result<String, TestError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = tokio::time::Instant::now() + wait;
    let mut stream = loop {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(stream) => break stream,
            Err(err) if tokio::time::Instant::now() > deadline => return Err(err.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::valid_resource_name;

    #[test]
    fn resource_names_as_kubelet_checks_them() {
        assert!(valid_resource_name("nvidia.com/gpu"));
        assert!(valid_resource_name("nvidia.com/mig-1g.10gb"));
        assert!(!valid_resource_name("gpu"));
        assert!(!valid_resource_name("kubernetes.io/gpu"));
        assert!(!valid_resource_name("nvidia.com/bad name"));
    }
}
