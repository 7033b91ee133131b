//! The restart policy of one worker, as a pure state machine: time is passed in, so
//! every path is testable without sleeping (ractor has no restart intensity of its own).
//!
//! Backoff starts at `backoff_initial_ms` and doubles to `backoff_max_ms`; it resets
//! after `HEALTHY_RESET` of uptime. More than `restart_max` restarts within
//! `restart_window_ms` fail the worker until a cool-down or an operator restart. Exit
//! code 78 (EX_CONFIG) fails it at once: restarting cannot fix a bad configuration.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::SupervisorConfig;

/// Uptime after which a worker counts as healthy and its backoff resets.
pub const HEALTHY_RESET: Duration = Duration::from_secs(10);

/// The exit code that means "configuration error, do not restart".
pub use toolvisor_protocol::worker::EXIT_CONFIG;

/// What to do after a worker died.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Start it again after this delay.
    RestartAfter(Duration),
    /// Give up for now; `retry_after` is `None` when only an operator can bring it back.
    Fail {
        /// When it tries again on its own.
        retry_after: Option<Duration>,
    },
}

/// The restart policy of one worker: the restarts in the window and the current backoff.
#[derive(Clone, Debug)]
pub struct RestartPolicy {
    cfg: SupervisorConfig,
    restarts: VecDeque<Instant>,
    backoff: Duration,
    ready_since: Option<Instant>,
}

impl RestartPolicy {
    /// A policy that has seen no restart.
    pub fn new(cfg: SupervisorConfig) -> Self {
        RestartPolicy {
            backoff: Duration::from_millis(cfg.backoff_initial_ms),
            cfg,
            restarts: VecDeque::new(),
            ready_since: None,
        }
    }

    /// The worker said `ready` at `now`.
    pub fn on_ready(&mut self, now: Instant) {
        self.ready_since = Some(now);
    }

    /// The worker died at `now` with `exit_code` (None for a signal).
    pub fn on_exit(&mut self, now: Instant, exit_code: Option<i32>) -> Next {
        if exit_code == Some(EXIT_CONFIG) {
            return Next::Fail { retry_after: None };
        }
        if self
            .ready_since
            .take()
            .is_some_and(|t| now.saturating_duration_since(t) >= HEALTHY_RESET)
        {
            self.backoff = Duration::from_millis(self.cfg.backoff_initial_ms);
        }
        let window = Duration::from_millis(self.cfg.restart_window_ms);
        while self
            .restarts
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > window)
        {
            self.restarts.pop_front();
        }
        if self.restarts.len() >= self.cfg.restart_max as usize {
            return Next::Fail {
                retry_after: Some(Duration::from_millis(self.cfg.cooldown_ms)),
            };
        }
        self.restarts.push_back(now);
        let delay = self.backoff;
        self.backoff = (self.backoff * 2).min(Duration::from_millis(self.cfg.backoff_max_ms));
        Next::RestartAfter(delay)
    }

    /// An operator restart or the end of a cool-down: start from a clean slate.
    pub fn reset(&mut self) {
        self.restarts.clear();
        self.backoff = Duration::from_millis(self.cfg.backoff_initial_ms);
        self.ready_since = None;
    }

    /// Take a new configuration (SIGHUP) without forgetting the history.
    pub fn reconfigure(&mut self, cfg: SupervisorConfig) {
        self.cfg = cfg;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn backoff_doubles_to_the_cap_then_fails() {
        let mut p = RestartPolicy::new(SupervisorConfig::default());
        let t0 = Instant::now();
        let delays: Vec<_> = (0..6).map(|i| p.on_exit(t0 + ms(i), Some(1))).collect();
        assert_eq!(
            delays,
            vec![
                Next::RestartAfter(ms(100)),
                Next::RestartAfter(ms(200)),
                Next::RestartAfter(ms(400)),
                Next::RestartAfter(ms(800)),
                Next::RestartAfter(ms(1600)),
                Next::Fail {
                    retry_after: Some(ms(30_000))
                },
            ]
        );
    }

    #[test]
    fn config_error_fails_at_once_without_retry() {
        let mut p = RestartPolicy::new(SupervisorConfig::default());
        assert_eq!(
            p.on_exit(Instant::now(), Some(EXIT_CONFIG)),
            Next::Fail { retry_after: None }
        );
    }

    #[test]
    fn healthy_uptime_resets_the_backoff() {
        let mut p = RestartPolicy::new(SupervisorConfig::default());
        let t0 = Instant::now();
        p.on_exit(t0, None);
        p.on_exit(t0 + ms(1), None);
        p.on_ready(t0 + ms(2));
        assert_eq!(
            p.on_exit(t0 + ms(2) + HEALTHY_RESET, None),
            Next::RestartAfter(ms(100))
        );
    }

    #[test]
    fn restarts_outside_the_window_are_forgotten() {
        let mut p = RestartPolicy::new(SupervisorConfig::default());
        let t0 = Instant::now();
        for i in 0..5 {
            assert!(matches!(p.on_exit(t0 + ms(i), None), Next::RestartAfter(_)));
        }
        assert!(matches!(
            p.on_exit(t0 + ms(31_000), None),
            Next::RestartAfter(_)
        ));
    }

    proptest! {
        /// Whatever the crash times, between two failures no window of
        /// `restart_window_ms` holds more than `restart_max` restarts, and every delay
        /// stays within the backoff bounds.
        #[test]
        fn intensity_and_backoff_bounds_hold(gaps in prop::collection::vec(0u64..20_000, 1..60)) {
            let cfg = SupervisorConfig::default();
            let mut p = RestartPolicy::new(cfg.clone());
            let t0 = Instant::now();
            let mut now = t0;
            let mut restarts: Vec<Instant> = Vec::new();
            for g in gaps {
                now += ms(g);
                match p.on_exit(now, Some(1)) {
                    Next::RestartAfter(d) => {
                        prop_assert!(d >= ms(cfg.backoff_initial_ms) && d <= ms(cfg.backoff_max_ms));
                        restarts.push(now);
                        let in_window = restarts.iter()
                            .filter(|t| now.saturating_duration_since(**t) <= ms(cfg.restart_window_ms))
                            .count();
                        prop_assert!(in_window <= cfg.restart_max as usize);
                    }
                    Next::Fail { retry_after } => {
                        // The cool-down passes, then counting starts afresh.
                        prop_assert_eq!(retry_after, Some(ms(cfg.cooldown_ms)));
                        now += ms(cfg.cooldown_ms);
                        restarts.clear();
                        p.reset();
                    }
                }
            }
        }
    }
}
