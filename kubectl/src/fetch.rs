//! The reads, and their failures said plainly: gpufair not installed, a pod that does not exist.

use gpufair_api::Queue;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::cli::KubeArgs;
use crate::why::{Explanation, event_time, explanation};

/// What went wrong, for the user.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("could not load the kubeconfig: {0}")]
    Kubeconfig(String),
    #[error(
        "gpufair is not installed in this cluster: the API server does not serve queues.gpufair.io/v1alpha1 \
         (install gpufair's CRDs and components first; see gpufair's README)"
    )]
    NotInstalled,
    #[error("pod {name:?} not found in namespace {namespace:?}")]
    PodNotFound { namespace: String, name: String },
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
}

fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// A client for the cluster the kubeconfig names, and its default namespace.
pub struct Cluster {
    client: Client,
    default_namespace: String,
}

impl Cluster {
    pub async fn connect(args: &KubeArgs) -> Result<Self, FetchError> {
        let options = KubeConfigOptions {
            context: args.context.clone(),
            cluster: args.cluster.clone(),
            user: args.user.clone(),
        };
        let config = match &args.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .map_err(|e| FetchError::Kubeconfig(format!("{}: {e}", path.display())))?;
                Config::from_custom_kubeconfig(kubeconfig, &options).await
            }
            None => Config::from_kubeconfig(&options).await,
        }
        .map_err(|e| FetchError::Kubeconfig(e.to_string()))?;
        let default_namespace = config.default_namespace.clone();
        let client = Client::try_from(config).map_err(|source| FetchError::Kube {
            what: "could not build a client".into(),
            source,
        })?;
        Ok(Self {
            client,
            default_namespace,
        })
    }

    /// `--namespace`, else the context's.
    pub fn namespace(&self, flag: Option<&str>) -> String {
        flag.map_or_else(|| self.default_namespace.clone(), str::to_string)
    }

    /// Every Queue: one list call.
    pub async fn queues(&self) -> Result<Vec<Queue>, FetchError> {
        let api: Api<Queue> = Api::all(self.client.clone());
        match api.list(&ListParams::default()).await {
            Ok(list) => Ok(list.items),
            Err(err) if status_code(&err) == Some(404) => Err(FetchError::NotInstalled),
            Err(source) => Err(FetchError::Kube {
                what: "could not list Queues".into(),
                source,
            }),
        }
    }

    pub async fn pod(&self, namespace: &str, name: &str) -> Result<Pod, FetchError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match api.get(name).await {
            Ok(pod) => Ok(pod),
            Err(err) if status_code(&err) == Some(404) => Err(FetchError::PodNotFound {
                namespace: namespace.into(),
                name: name.into(),
            }),
            Err(source) => Err(FetchError::Kube {
                what: format!("could not read pod {namespace}/{name}"),
                source,
            }),
        }
    }

    /// The latest `Waiting` Event on the pod with `uid`: the API server filters by field, so
    /// only that pod's few Events come back.
    pub async fn latest_waiting_event(
        &self,
        namespace: &str,
        uid: &str,
    ) -> Result<Option<Explanation>, FetchError> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let params =
            ListParams::default().fields(&format!("involvedObject.uid={uid},reason=Waiting"));
        let events = api
            .list(&params)
            .await
            .map_err(|source| FetchError::Kube {
                what: format!("could not list the Events of pod {namespace}/{uid}"),
                source,
            })?
            .items;
        Ok(events
            .into_iter()
            .map(|e| (event_time(&e), e.message.unwrap_or_default()))
            .max_by(|a, b| a.0.unwrap_or(0.0).total_cmp(&b.0.unwrap_or(0.0)))
            .map(|(at, message)| explanation(message, at)))
    }
}
