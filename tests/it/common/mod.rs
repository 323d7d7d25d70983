//! Test harness, split by what it starts: a real `redis-server` per test on a free
//! loopback port (`redis`), a local Redis Cluster (`cluster`), either of them as a
//! `TestStore` (`store`), the real server in-process on `127.0.0.1:0` (`server`) or as
//! a child process (`process`); and the helpers tests share: waiting on observable
//! state (`wait`), building requests (`calls`), a ledger of what clients were told
//! (`ledger`), and a real browser for the dashboard (`browser`).

#![allow(dead_code)]

pub mod browser;
pub mod calls;
pub mod cluster;
pub mod ledger;
pub mod pki;
pub mod process;
pub mod redis;
pub mod server;
#[macro_use]
pub mod store;
pub mod wait;

pub use browser::Browser;
pub use calls::*;
pub use ledger::{seed_from, Ledger, Rng};
pub use pki::{Issued, Pki};
pub use process::*;
pub use redis::TestRedis;
pub use server::TestServer;
pub use store::{Store, TestStore};
pub use wait::*;

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicU32, Ordering},
        Once,
    },
};

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Logs once per test binary, through the test writer (shown for failing tests).
pub fn init_tracing() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_env("TURNSTILE_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

/// A fresh, empty directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("ts-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
