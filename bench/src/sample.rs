//! Measuring: latencies in an HDR histogram (µs, 3 significant digits), a progress line
//! on stderr, and `drive`, which runs N clients in a loop for a fixed time.

use std::{
    future::Future,
    io::{IsTerminal, Write},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use hdrhistogram::Histogram;
use tokio::{task::JoinSet, time::Instant};
use tokio_util::sync::CancellationToken;

/// Latencies of one run.
#[derive(Clone)]
pub struct Latency(Histogram<u64>);

impl Default for Latency {
    fn default() -> Self {
        // 1 µs to 10 min; values above are clamped to the top.
        Self(Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds"))
    }
}

impl Latency {
    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        self.0
            .saturating_record((latency.as_micros() as u64).max(1));
    }

    /// Adds another run's latencies.
    pub fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides: cannot fail.
        let _ = self.0.add(&other.0);
    }

    /// How many were recorded.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The `q` quantile (0–1) in ms.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        self.0.value_at_quantile(q) as f64 / 1000.0
    }

    /// The largest in ms.
    pub fn max_ms(&self) -> f64 {
        self.0.max() as f64 / 1000.0
    }
}

/// Counts completed operations and shows them on one stderr line while a run lasts.
pub struct Progress {
    done: AtomicU64,
}

impl Progress {
    /// Starts showing `label`'s count every 250 ms until the guard drops.
    pub fn show(label: String) -> (Arc<Self>, ProgressGuard) {
        let progress = Arc::new(Self {
            done: AtomicU64::new(0),
        });
        let stop = CancellationToken::new();
        let shown = progress.clone();
        let token = stop.clone();
        // Redrawn in place on a terminal; elsewhere (CI logs) one line when done.
        let live = std::io::stderr().is_terminal();
        tokio::spawn(async move {
            let started = Instant::now();
            let line = || {
                format!(
                    "{label}: {} ops in {:.1} s",
                    shown.done.load(Ordering::Relaxed),
                    started.elapsed().as_secs_f64()
                )
            };
            loop {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(250)) => {}
                    () = token.cancelled() => break,
                }
                if live {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r\x1b[2K{}", line());
                    let _ = err.flush();
                }
            }
            if live {
                let _ = write!(std::io::stderr(), "\r\x1b[2K");
            } else {
                eprintln!("{}", line());
            }
        });
        (progress, ProgressGuard(stop))
    }

    /// One more operation done.
    pub fn tick(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` more operations done.
    pub fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }
}

/// Stops the progress line when dropped.
pub struct ProgressGuard(CancellationToken);

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// What a timed run measured.
pub struct Sampled {
    /// Operations completed.
    pub count: u64,
    /// How long the run took.
    pub elapsed: Duration,
    /// One latency per operation.
    pub latency: Latency,
}

impl Sampled {
    /// Operations per second.
    pub fn ops_per_s(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs one client per state, each calling `cycle` in a loop for `duration`; every
/// cycle is one operation, timed. The state goes into each cycle and comes back out,
/// so a client can keep its connection and names without borrowing across awaits.
pub async fn drive<S, F, Fut>(
    label: &str,
    states: Vec<S>,
    duration: Duration,
    cycle: F,
) -> Result<Sampled, String>
where
    S: Send + 'static,
    F: Fn(S) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<S, String>> + Send + 'static,
{
    let (progress, _shown) = Progress::show(label.to_owned());
    let started = Instant::now();
    let until = started + duration;
    let mut clients = JoinSet::new();
    for state in states {
        let cycle = cycle.clone();
        let progress = progress.clone();
        clients.spawn(async move {
            let mut latency = Latency::default();
            let mut state = state;
            while Instant::now() < until {
                let sent = Instant::now();
                state = cycle(state).await?;
                latency.record(sent.elapsed());
                progress.tick();
            }
            Ok::<_, String>(latency)
        });
    }
    let mut latency = Latency::default();
    while let Some(client) = clients.join_next().await {
        latency.merge(&client.map_err(|err| format!("client task failed: {err}"))??);
    }
    Ok(Sampled {
        count: latency.count(),
        elapsed: started.elapsed(),
        latency,
    })
}
