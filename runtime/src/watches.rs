//! The process's watches: one per kind, each event handed to every part that reads the kind.
//!
//! Admission (on every replica) and the controller (on the Lease holder) both read Queues; a
//! watch of their own each would list and stream every Queue twice. One watch instead feeds
//! admission's index ([`ClusterQueues`]) and the controller's cache ([`QueueFeed`]).
//! WorkloadFamilies are watched for admission's right-sizing only.

use futures::{Stream, StreamExt};
use gpufair_api::Queue;
use gpufair_controller::QueueFeed;
use gpufair_webhook::families::ClusterFamilies;
use gpufair_webhook::queues::ClusterQueues;
use gpufair_webhook::shutdown::Shutdown;
use kube::Resource;

use crate::cli::ServeArgs;
use crate::kube_api::{KubeWatchApi, WatchApi, WatchError, WatchEvent};

/// Hands each event of `stream` (a watch of every `K` in the cluster) to `apply`, until
/// draining. A broken watch is retried with backoff and relists; `apply` sees that as a new
/// `Init` .. `InitDone`.
pub async fn watch_all<K>(
    stream: impl Stream<Item = Result<WatchEvent<K>, WatchError>> + Send,
    shutdown: Shutdown,
    mut apply: impl FnMut(&WatchEvent<K>) + Send,
) where
    K: Resource<DynamicType = ()>,
{
    futures::pin_mut!(stream);
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            _ = shutdown.draining() => return,
        };
        match event {
            None => return,
            Some(Err(err)) => {
                tracing::warn!(error = %err, kind = %K::kind(&()), "watch failed; retrying");
            }
            Some(Ok(event)) => apply(&event),
        }
    }
}

/// What this process reads from the cluster, by its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterReaders {
    /// Admission reads Queues and WorkloadFamilies from the cluster: it runs, without
    /// `--queues-file`.
    pub admission: bool,
    /// The controller runs (on whichever replica leads) and reads Queues.
    pub controller: bool,
}

impl ClusterReaders {
    pub fn of(args: &ServeArgs) -> Self {
        Self {
            admission: args.admission && args.queues_file.is_none(),
            controller: args.controller.enabled,
        }
    }

    /// Whether the process needs the Kubernetes API at all.
    pub fn need_cluster(self) -> bool {
        self.admission || self.controller
    }
}

/// Who reads the cluster's Queues in this process.
pub struct QueueReaders {
    /// Admission, unless it is off or reads `--queues-file`.
    pub admission: Option<ClusterQueues>,
    /// The controller, when it runs.
    pub controller: Option<QueueFeed>,
}

impl QueueReaders {
    /// Whether anyone reads the cluster's Queues, so a watch is needed.
    pub fn any(&self) -> bool {
        self.admission.is_some() || self.controller.is_some()
    }

    /// Hands one event to each reader.
    pub fn apply(&mut self, event: &WatchEvent<Queue>) {
        if let Some(admission) = &mut self.admission {
            admission.apply(event);
        }
        if let Some(controller) = &mut self.controller {
            controller.apply(event);
        }
    }
}

/// The one Queue watch, feeding every reader, until draining.
pub async fn queues(api: KubeWatchApi, mut readers: QueueReaders, shutdown: Shutdown) {
    watch_all(api.watch_queues(), shutdown, move |event| {
        readers.apply(event)
    })
    .await;
}

/// The WorkloadFamily watch for admission's right-sizing, until draining.
pub async fn families(api: KubeWatchApi, mut admission: ClusterFamilies, shutdown: Shutdown) {
    watch_all(api.watch_workload_families(), shutdown, move |event| {
        admission.apply(event)
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gpufair_webhook::metrics::Metrics;
    use gpufair_webhook::queues::QueueStore;
    use serde_json::json;

    use super::*;

    fn queue(name: &str, generation: i64) -> Queue {
        serde_json::from_value(json!({
            "apiVersion": "gpufair.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": name, "generation": generation},
            "spec": {"namespaces": ["ml"]},
        }))
        .expect("a Queue")
    }

    #[test]
    fn one_event_reaches_admission_and_the_controller() {
        let admission_store = Arc::new(QueueStore::default());
        let (controller_cache, feed) = gpufair_controller::queue_cache();
        let mut readers = QueueReaders {
            admission: Some(ClusterQueues::new(
                admission_store.clone(),
                Arc::new(Metrics::new()),
            )),
            controller: Some(feed),
        };
        assert!(readers.any());
        for event in [
            WatchEvent::Init,
            WatchEvent::InitApply(queue("a", 1)),
            WatchEvent::InitDone,
            WatchEvent::Apply(queue("b", 1)),
        ] {
            readers.apply(&event);
        }
        assert!(admission_store.is_synced());
        assert_eq!(admission_store.len(), 2);
        let mut names: Vec<_> = controller_cache
            .store()
            .state()
            .iter()
            .filter_map(|q| q.metadata.name.clone())
            .collect();
        names.sort();
        assert_eq!(names, ["a", "b"]);

        readers.apply(&WatchEvent::Delete(queue("a", 1)));
        assert_eq!(admission_store.len(), 1);
        assert_eq!(controller_cache.store().state().len(), 1);
    }

    fn readers(flags: &[&str]) -> ClusterReaders {
        use clap::Parser;
        let mut argv = vec!["gpufair-webhook", "serve"];
        argv.extend_from_slice(flags);
        let crate::cli::Command::Serve(args) = crate::cli::Cli::try_parse_from(argv)
            .expect("flags")
            .command;
        ClusterReaders::of(&args)
    }

    #[test]
    fn the_flags_say_who_reads_the_cluster() {
        let tls = ["--tls-cert=c.pem", "--tls-key=k.pem"];
        let both = readers(&[tls[0], tls[1], "--controller=true"]);
        assert_eq!(
            both,
            ClusterReaders {
                admission: true,
                controller: true
            }
        );
        // Admission from a file: the controller still needs the cluster's Queues.
        let from_file = readers(&[tls[0], tls[1], "--queues-file=q.yaml", "--controller=true"]);
        assert!(!from_file.admission && from_file.controller && from_file.need_cluster());
        let controller_alone = readers(&["--admission=false", "--controller=true"]);
        assert!(!controller_alone.admission && controller_alone.need_cluster());
        let admission_alone = readers(&[tls[0], tls[1]]);
        assert!(admission_alone.admission && !admission_alone.controller);
        let offline = readers(&[tls[0], tls[1], "--queues-file=q.yaml"]);
        assert!(!offline.need_cluster());
    }

    #[test]
    fn no_reader_needs_no_watch() {
        let readers = QueueReaders {
            admission: None,
            controller: None,
        };
        assert!(!readers.any());
    }
}
