//! Admission connections spread over threads that each run a single-threaded runtime.
//!
//! A connection stays on the thread it was given for its whole life, so serving it needs no
//! cross-thread wake-ups or work stealing. A review costs a few microseconds, and on a
//! work-stealing pool the wake-ups and steals cost more CPU than that (RELIABILITY.md,
//! "Admission threads"). The accept loop's own runtime is the first of the threads; each new
//! connection goes to the thread with the fewest open connections.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

/// One thread's runtime and how many connections it serves now.
struct ConnectionThread {
    runtime: Handle,
    open: Arc<AtomicUsize>,
}

/// A thread started here: told to stop, then joined, when the set is dropped.
struct OwnedThread {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// The accept loop's runtime plus `threads - 1` more, each on a thread of its own.
pub struct ConnectionThreads {
    threads: Vec<ConnectionThread>,
    owned: Vec<OwnedThread>,
}

/// Counts a connection as open on its thread until the connection's task ends.
struct OpenGuard(Arc<AtomicUsize>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnectionThreads {
    /// Starts `threads - 1` threads beside the current runtime (`threads` at least 1). Must be
    /// called on the runtime that will run the accept loop.
    pub fn start(threads: usize) -> std::io::Result<Self> {
        let mut set = Self {
            threads: vec![ConnectionThread {
                runtime: Handle::current(),
                open: Arc::default(),
            }],
            owned: Vec::new(),
        };
        for index in 1..threads.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = runtime.handle().clone();
            let (stop, stopped) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("gpufair-admission-{index}"))
                .spawn(move || {
                    // A current-thread runtime runs its tasks only inside `block_on`.
                    let _ = runtime.block_on(stopped);
                    // Connections still open past the drain's grace period are cut here.
                    runtime.shutdown_background();
                })?;
            set.owned.push(OwnedThread {
                stop: Some(stop),
                thread: Some(thread),
            });
            set.threads.push(ConnectionThread {
                runtime: handle,
                open: Arc::default(),
            });
        }
        Ok(set)
    }

    /// Connections open on each thread, in order (the accept loop's first).
    #[cfg(test)]
    fn open_per_thread(&self) -> Vec<usize> {
        self.threads
            .iter()
            .map(|t| t.open.load(Ordering::Relaxed))
            .collect()
    }

    /// Serves `stream` with `serve` on the thread with the fewest open connections, tracked
    /// by `tracker` so a drain can wait for it.
    pub fn spawn<F, Fut>(&self, tracker: &TaskTracker, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        // The first thread wins ties, so with few clients the accept loop's own runtime
        // serves them and no socket changes runtime.
        let (index, thread) = self
            .threads
            .iter()
            .enumerate()
            .min_by_key(|(_, t)| t.open.load(Ordering::Relaxed))
            .expect("the accept loop's runtime is always a thread");
        thread.open.fetch_add(1, Ordering::Relaxed);
        let guard = OpenGuard(thread.open.clone());
        if index == 0 {
            tracker.spawn(async move {
                let _guard = guard;
                serve(stream).await;
            });
            return;
        }
        // A tokio socket belongs to the runtime that registered it: hand it over.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(err) => {
                tracing::debug!(error = %err, "could not hand a connection to its thread");
                return;
            }
        };
        tracker.spawn_on(
            async move {
                let _guard = guard;
                match TcpStream::from_std(stream) {
                    Ok(stream) => serve(stream).await,
                    Err(err) => {
                        tracing::debug!(error = %err, "could not register a handed-over connection");
                    }
                }
            },
            &thread.runtime,
        );
    }
}

impl Drop for ConnectionThreads {
    fn drop(&mut self) {
        for owned in &mut self.owned {
            if let Some(stop) = owned.stop.take() {
                let _ = stop.send(());
            }
        }
        for owned in &mut self.owned {
            if let Some(thread) = owned.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A server-side stream; its client side goes into `clients`, kept open by the test.
    async fn accepted(
        listener: &tokio::net::TcpListener,
        clients: &mut Vec<TcpStream>,
    ) -> TcpStream {
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(TcpStream::connect(addr));
        let (server, _) = listener.accept().await.unwrap();
        clients.push(client.await.unwrap().unwrap());
        server
    }

    #[tokio::test]
    async fn connections_go_to_the_thread_with_fewest_and_run_there() {
        let threads = ConnectionThreads::start(3).unwrap();
        assert_eq!(threads.open_per_thread().len(), 3);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tracker = TaskTracker::new();
        let (release, released) = tokio::sync::watch::channel(false);
        let (names_tx, mut names_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut clients = Vec::new();
        for _ in 0..6 {
            let stream = accepted(&listener, &mut clients).await;
            let (names, mut released) = (names_tx.clone(), released.clone());
            threads.spawn(&tracker, stream, move |stream| async move {
                let _ = names.send(std::thread::current().name().map(str::to_string));
                let _ = released.wait_for(|r| *r).await;
                drop(stream);
            });
        }
        let mut names = Vec::new();
        for _ in 0..6 {
            names.push(names_rx.recv().await.unwrap());
        }
        assert_eq!(threads.open_per_thread(), vec![2, 2, 2]);
        let on = |name: &str| names.iter().filter(|n| n.as_deref() == Some(name)).count();
        assert_eq!(on("gpufair-admission-1"), 2, "{names:?}");
        assert_eq!(on("gpufair-admission-2"), 2, "{names:?}");

        release.send_replace(true);
        tracker.close();
        tokio::time::timeout(Duration::from_secs(5), tracker.wait())
            .await
            .expect("every connection's task ends");
        assert_eq!(threads.open_per_thread(), vec![0, 0, 0]);
    }

    #[tokio::test]
    async fn one_thread_serves_on_the_accept_loops_runtime() {
        let threads = ConnectionThreads::start(1).unwrap();
        assert_eq!(threads.open_per_thread().len(), 1);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tracker = TaskTracker::new();
        let (done_tx, done_rx) = oneshot::channel();
        let here = std::thread::current().id();
        let mut clients = Vec::new();
        let stream = accepted(&listener, &mut clients).await;
        threads.spawn(&tracker, stream, move |_stream| async move {
            let _ = done_tx.send(std::thread::current().id());
        });
        assert_eq!(done_rx.await.unwrap(), here);
    }
}
