//! gpufair's mutating admission webhook.
//!
//! Every GPU pod creation passes through here: the pod is read into plain facts, gpufair-core
//! plans its mutation (queue, priority class, scheduling gate, node affinity, tolerations,
//! labels), and this crate only turns the plan into a JSON patch and serves it over HTTPS.
//!
//! This is the admission server as a library; the `gpufair-webhook` binary (gpufair-runtime)
//! composes it with the gate-release controller and runs the watches both read.

pub mod admission;
pub mod admission_runtime;
pub mod connection_threads;
pub mod envelope;
pub mod facts;
pub mod families;
pub mod first_request;
#[cfg(any(test, feature = "test-support"))]
pub mod fuzz_entry;
pub mod http;
pub mod kube_api;
pub mod metrics;
pub mod patch;
pub mod pod;
pub mod queues;
pub mod reload;
pub mod response;
pub mod server;
pub mod shutdown;
pub mod state;
pub mod tls;
