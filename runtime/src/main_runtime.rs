//! The process's main runtime: the controller, the watches, the metrics server and the reload
//! timers. Admission runs on threads of its own (`admission_runtime`).

/// Workers the main runtime starts when `TOKIO_WORKER_THREADS` does not say.
///
/// Its tasks are a few long-lived loops, and the controller's cycle runs inline on one worker
/// while the others keep the watches going, so a handful of workers serve it on any node.
/// tokio's default is one per CPU the process may use, and a Deployment without a CPU limit may
/// use the whole node: on 64 CPUs that is 64 mostly idle workers, each with its stack and its
/// allocator heap (RELIABILITY.md, "Main runtime workers").
pub const MAX_WORKERS: usize = 4;

/// The worker count for a process that may use `cpus` CPUs, or `None` to leave it to tokio,
/// which reads `TOKIO_WORKER_THREADS` when it is set (`worker_threads_set`).
pub fn workers(cpus: usize, worker_threads_set: bool) -> Option<usize> {
    (!worker_threads_set).then(|| cpus.clamp(1, MAX_WORKERS))
}

/// The main runtime, with [`workers`] for this process.
pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    if let Some(count) = workers(cpus, std::env::var_os("TOKIO_WORKER_THREADS").is_some()) {
        builder.worker_threads(count);
    }
    builder.enable_all().build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_worker_per_cpu_up_to_the_cap() {
        assert_eq!(workers(1, false), Some(1));
        assert_eq!(workers(2, false), Some(2));
        assert_eq!(workers(MAX_WORKERS, false), Some(MAX_WORKERS));
        assert_eq!(workers(64, false), Some(MAX_WORKERS));
    }

    #[test]
    fn tokio_worker_threads_is_left_to_tokio() {
        assert_eq!(workers(64, true), None);
        assert_eq!(workers(1, true), None);
    }
}
