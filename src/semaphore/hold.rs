//! A semaphore's `Hold` stream: the locks' engine (`lock::hold`), over this store.

use std::time::Duration;

use super::{acquire::SemaphoreAttempt, SemaphoreSpec, SemaphoreStore};
use crate::{
    error::Result,
    limits::Limits,
    lock::{
        hold::{self, HoldSpec, HoldStream, Holdable},
        Renewal, Stop, Won,
    },
    shutdown::Shutdown,
};

impl SemaphoreStore {
    /// Opens a Hold stream on permits of a semaphore of this store's tenant.
    pub fn hold(&self, spec: HoldSpec<SemaphoreSpec>) -> Result<HoldStream> {
        hold::open(self.clone(), spec)
    }
}

impl Holdable for SemaphoreStore {
    type Spec = SemaphoreSpec;

    fn name(spec: &SemaphoreSpec) -> &str {
        &spec.name
    }

    fn ttl(spec: &SemaphoreSpec) -> Duration {
        spec.ttl
    }

    fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    async fn take(&self, spec: &SemaphoreSpec, stop: &Stop) -> Result<Option<Won>> {
        Ok(match self.wait_for(spec, stop).await? {
            SemaphoreAttempt::Won(won, ..) => Some(won),
            SemaphoreAttempt::Busy { .. } => None,
        })
    }

    async fn renew(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
        generation: Option<u64>,
        take_over: bool,
    ) -> Result<Renewal> {
        SemaphoreStore::renew(self, name, token, ttl, generation, take_over).await
    }

    async fn release_at(&self, name: &str, token: &str, generation: Option<u64>) -> Result<bool> {
        SemaphoreStore::release_at(self, name, token, generation).await
    }
}
