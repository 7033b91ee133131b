//! Drain bookkeeping: how many calls are open, a wake-up when the last one ends, and
//! the token that cancels the rest once the drain grace is over.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long cancelled calls get to answer after the grace, before serve goes on.
const CANCELLED_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Default)]
struct Open {
    count: AtomicUsize,
    idle: Notify,
}

/// The open calls of the service.
#[derive(Debug, Default)]
pub struct Drain {
    open: Arc<Open>,
    /// Parent of every call's cancellation token: cancelling it cancels them all.
    shutdown: CancellationToken,
}

/// An open call; dropping it lets a drain go on.
pub struct ActiveCall(Arc<Open>);

impl Drop for ActiveCall {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Drain {
    /// No call open, not shutting down.
    pub fn new() -> Drain {
        Drain::default()
    }

    /// Count a call as open until the guard drops.
    pub fn open(&self) -> ActiveCall {
        self.open.count.fetch_add(1, Ordering::SeqCst);
        ActiveCall(self.open.clone())
    }

    /// Calls open now.
    pub fn active(&self) -> usize {
        self.open.count.load(Ordering::SeqCst)
    }

    /// Cancelled when the drain gives up on the calls still open.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Wait until no call is open, or `grace` passes; then cancel the rest and wait
    /// (bounded) for them to answer.
    pub async fn run(&self, grace: Duration) {
        if tokio::time::timeout(grace, self.until_no_calls())
            .await
            .is_err()
        {
            tracing::warn!(
                open = self.active(),
                "drain grace over; cancelling the calls still open"
            );
            self.shutdown().cancel();
            let _ = tokio::time::timeout(CANCELLED_GRACE, self.until_no_calls()).await;
        }
    }

    /// Resolves once no call is open.
    async fn until_no_calls(&self) {
        loop {
            let notified = self.open.idle.notified();
            if self.active() == 0 {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drain_ends_when_the_last_call_does() {
        let d = Drain::new();
        let call = d.open();
        assert_eq!(d.active(), 1);
        let waiter = async {
            d.run(Duration::from_secs(30)).await;
        };
        let closer = async move { drop(call) };
        tokio::join!(waiter, closer);
        assert_eq!(d.active(), 0);
        assert!(!d.shutdown().is_cancelled());
    }

    #[tokio::test]
    async fn past_the_grace_open_calls_are_cancelled() {
        let d = Drain::new();
        let _call = d.open();
        d.run(Duration::from_millis(1)).await;
        assert!(d.shutdown().is_cancelled());
    }
}
