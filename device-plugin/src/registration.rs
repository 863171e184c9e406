//! Serving each resource on its own socket and registering it with kubelet.
//!
//! Order matters: kubelet dials the plugin back from inside `Register`, so the server must be
//! accepting before `Register` is sent.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;

use crate::devices::Resource;
use crate::plugin::{DevicePluginService, PluginShared};
use crate::proto::deviceplugin::device_plugin_server::DevicePluginServer;
use crate::proto::deviceplugin::registration_client::RegistrationClient;
use crate::proto::deviceplugin::{DevicePluginOptions, KUBELET_SOCKET, RegisterRequest, VERSION};

/// Registration retries back off up to this, so a kubelet that comes back is found quickly.
const MAX_RETRY: Duration = Duration::from_secs(1);
/// How long a stopping server may take to close its connections.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Kubelet opens ListAndWatch right after accepting a registration; if it has not by then,
/// its calls are failing before they reach the plugin.
const DIAL_BACK_WAIT: Duration = Duration::from_secs(10);
/// The oldest kubelet whose gRPC client names a Unix socket in a way HTTP/2 servers accept.
pub const MIN_KUBELET_VERSION: &str = "1.26";

#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    #[error("cannot bind plugin socket {path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot connect to kubelet at {path}: {message}")]
    Connect { path: PathBuf, message: String },
    #[error("kubelet refused registration of {resource}: {status}")]
    Refused { resource: String, status: String },
}

/// One running server (and its registration task).
pub struct ServedResource {
    pub resource: Arc<Resource>,
    pub socket: PathBuf,
    stop: CancellationToken,
    server: JoinHandle<()>,
    registrar: Option<JoinHandle<()>>,
    opened: Arc<Notify>,
}

impl ServedResource {
    /// Stops serving (ending ListAndWatch streams) and removes the socket.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(registrar) = self.registrar {
            registrar.abort();
        }
        if tokio::time::timeout(STOP_GRACE, &mut self.server)
            .await
            .is_err()
        {
            // A client that keeps its connection open (an old kubelet that is not quite gone)
            // would keep the server task, its connections and their file descriptors alive;
            // after a kubelet restart storm those would pile up.
            tracing::warn!(socket = %self.socket.display(), "server did not stop in time; aborting it");
            self.server.abort();
        }
        remove_socket(&self.socket);
    }
}

impl ServedResource {
    /// Stops without waiting for the server task (used on error paths that cannot await).
    fn abandon(self) {
        self.stop.cancel();
        if let Some(registrar) = self.registrar {
            registrar.abort();
        }
        remove_socket(&self.socket);
    }
}

fn remove_socket(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => tracing::warn!(path = %path.display(), %err, "cannot remove socket"),
    }
}

/// Binds `dir/<resource socket>` (replacing a stale file) and serves the resource on it.
pub fn serve(
    dir: &Path,
    resource: Arc<Resource>,
    shared: PluginShared,
    parent: &CancellationToken,
) -> Result<ServedResource, RegistrationError> {
    let socket = dir.join(&resource.socket);
    remove_socket(&socket);
    let listener = UnixListener::bind(&socket).map_err(|source| RegistrationError::Bind {
        path: socket.clone(),
        source,
    })?;
    let stop = parent.child_token();
    let opened = Arc::new(Notify::new());
    let service = DevicePluginService::new(
        Arc::clone(&resource),
        shared,
        stop.clone(),
        Arc::clone(&opened),
    );
    let server_stop = stop.clone();
    let name = resource.name.clone();
    let server = tokio::spawn(async move {
        let result = tonic::transport::Server::builder()
            .add_service(DevicePluginServer::new(service))
            .serve_with_incoming_shutdown(
                UnixListenerStream::new(listener),
                server_stop.cancelled_owned(),
            )
            .await;
        if let Err(err) = result {
            tracing::error!(resource = %name, %err, "plugin server failed");
        }
    });
    tracing::info!(resource = %resource.name, socket = %socket.display(), devices = resource.devices.len(), "serving");
    Ok(ServedResource {
        resource,
        socket,
        stop,
        server,
        registrar: None,
        opened,
    })
}

/// Why kubelet may accept a registration and then never open ListAndWatch.
pub fn no_dial_back_message(resource: &str, waited: Duration) -> String {
    format!(
        "kubelet accepted the registration of {resource} but has not opened ListAndWatch \
         within {waited:?}. Kubelets before {MIN_KUBELET_VERSION} send the plugin's socket path \
         as the HTTP/2 :authority, which this plugin's gRPC server refuses with PROTOCOL_ERROR \
         (kubelet then logs that ListAndWatch ended): gpufair's device plugin needs kubelet \
         {MIN_KUBELET_VERSION} or later"
    )
}

/// After a registration, waits for kubelet's ListAndWatch; returns whether it came in time.
pub async fn watch_dial_back(opened: &Notify, resource: &str, wait: Duration) -> bool {
    if tokio::time::timeout(wait, opened.notified()).await.is_ok() {
        return true;
    }
    tracing::error!("{}", no_dial_back_message(resource, wait));
    false
}

/// Sends one `Register` for `resource` to kubelet's socket in `dir`.
pub async fn register(dir: &Path, resource: &Resource) -> Result<(), RegistrationError> {
    let kubelet = dir.join(KUBELET_SOCKET);
    let mut client = RegistrationClient::connect(format!("unix://{}", kubelet.display()))
        .await
        .map_err(|err| RegistrationError::Connect {
            path: kubelet.clone(),
            message: err.to_string(),
        })?;
    client
        .register(RegisterRequest {
            version: VERSION.into(),
            endpoint: resource.socket.clone(),
            resource_name: resource.name.clone(),
            options: Some(DevicePluginOptions {
                pre_start_required: false,
                get_preferred_allocation_available: true,
            }),
        })
        .await
        .map_err(|status| RegistrationError::Refused {
            resource: resource.name.clone(),
            status: status.to_string(),
        })?;
    Ok(())
}

/// Serves every resource, then registers each in the background, retrying until kubelet
/// accepts or the server is stopped.
pub fn serve_and_register(
    dir: &Path,
    resources: &[Arc<Resource>],
    shared: &PluginShared,
    parent: &CancellationToken,
) -> Result<Vec<ServedResource>, RegistrationError> {
    let mut served: Vec<ServedResource> = Vec::new();
    for resource in resources {
        let mut one = match serve(dir, Arc::clone(resource), shared.clone(), parent) {
            Ok(one) => one,
            Err(err) => {
                // Leave nothing half-started behind: the caller retries the whole set.
                for started in served {
                    started.abandon();
                }
                return Err(err);
            }
        };
        let dir = dir.to_path_buf();
        let resource = Arc::clone(resource);
        let stop = one.stop.clone();
        let opened = Arc::clone(&one.opened);
        one.registrar = Some(tokio::spawn(async move {
            let mut delay = Duration::from_millis(100);
            loop {
                match register(&dir, &resource).await {
                    Ok(()) => {
                        tracing::info!(resource = %resource.name, "registered with kubelet");
                        watch_dial_back(&opened, &resource.name, DIAL_BACK_WAIT).await;
                        return;
                    }
                    Err(err) => tracing::warn!(%err, retry_in = ?delay, "registration failed"),
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(MAX_RETRY);
            }
        }));
        served.push(one);
    }
    Ok(served)
}

/// Stops every server and removes its socket.
pub async fn stop_all(served: Vec<ServedResource>) {
    futures::future::join_all(served.into_iter().map(ServedResource::stop)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_list_and_watch_points_at_the_kubelet_version() {
        let opened = Notify::new();
        assert!(!watch_dial_back(&opened, "nvidia.com/gpu", Duration::from_millis(20)).await);
        let message = no_dial_back_message("nvidia.com/gpu", Duration::from_secs(10));
        assert!(message.contains("nvidia.com/gpu"), "{message}");
        assert!(message.contains("kubelet 1.26 or later"), "{message}");
        assert!(message.contains(":authority"), "{message}");
        // ListAndWatch opened before the wait began (kubelet is quick) still counts.
        opened.notify_one();
        assert!(watch_dial_back(&opened, "nvidia.com/gpu", Duration::from_millis(20)).await);
    }
}
