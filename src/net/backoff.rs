//! How long to wait before trying again: one type for every retry loop of the desk (model
//! requests, MCP servers restarted, the workers' and the event reader's database retries, the
//! client's reconnects), each declaring its policy as a constant.

use std::time::Duration;

use rand::Rng;

/// A wait that grows with each failure, up to `max` (jitter included).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    growth: Growth,
    /// Up to this fraction of the wait is added at random, so that many waiters that failed
    /// together do not come back together.
    jitter: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Growth {
    /// first·2^(n−1): for a peer that may need a while (a provider's rate limit, a server that
    /// restarts).
    Doubling,
    /// first·n: for the desk's own database, which is usually back soon.
    Linear,
}

impl Backoff {
    /// first, 2·first, 4·first, … up to `max`.
    pub const fn doubling(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            growth: Growth::Doubling,
            jitter: 0.0,
        }
    }

    /// first, 2·first, 3·first, … up to `max`.
    pub const fn linear(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            growth: Growth::Linear,
            jitter: 0.0,
        }
    }

    /// The same, with up to `fraction` of each wait added at random.
    pub const fn with_jitter(self, fraction: f64) -> Backoff {
        Backoff {
            jitter: fraction,
            ..self
        }
    }

    /// The wait after `failures` failures in a row (1 for the first; 0 counts as 1).
    pub fn delay(&self, failures: u32) -> Duration {
        let n = failures.max(1);
        let delay = match self.growth {
            Growth::Doubling => self.first.saturating_mul(1u32.checked_shl(n - 1).unwrap_or(u32::MAX)),
            Growth::Linear => self.first.saturating_mul(n),
        }
        .min(self.max);
        if self.jitter > 0.0 {
            let extra: f64 = rand::rng().random_range(0.0..=self.jitter);
            (delay + delay.mul_f64(extra)).min(self.max)
        } else {
            delay
        }
    }

    /// `delay`, unless the peer named its own wait (a `Retry-After`): that replaces the backoff
    /// (the peer knows when it will be ready) but not the cap, so a hint that is still too early
    /// costs one more try, never a stalled caller.
    pub fn delay_or_hint(&self, failures: u32, hint: Option<Duration>) -> Duration {
        match hint {
            Some(hint) => hint.min(self.max),
            None => self.delay(failures),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODEL: Backoff = Backoff::doubling(Duration::from_millis(500), Duration::from_secs(32)).with_jitter(0.25);

    #[test]
    fn doubling_grows_with_jitter_and_caps() {
        let base = Duration::from_millis(500);
        for _ in 0..50 {
            for failures in 1..=5u32 {
                let d = MODEL.delay(failures);
                let nominal = base * 2u32.pow(failures - 1);
                assert!(d >= nominal && d <= nominal.mul_f64(1.25), "{failures}: {d:?}");
            }
            assert!(MODEL.delay(100) <= Duration::from_secs(32));
        }
        assert!(MODEL.delay(0) >= base);
    }

    #[test]
    fn a_hint_wins_below_the_cap() {
        let hint = Duration::from_millis(1500);
        assert_eq!(MODEL.delay_or_hint(1, Some(hint)), hint);
        assert_eq!(
            MODEL.delay_or_hint(1, Some(Duration::from_secs(90))),
            Duration::from_secs(32)
        );
        assert_eq!(
            MODEL.delay_or_hint(9, Some(Duration::from_millis(1))),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn linear_grows_by_steps_and_caps() {
        let db = Backoff::linear(Duration::from_millis(250), Duration::from_secs(2));
        let waits: Vec<u128> = (1..=10).map(|n| db.delay(n).as_millis()).collect();
        assert_eq!(waits, [250, 500, 750, 1000, 1250, 1500, 1750, 2000, 2000, 2000]);
    }

    #[test]
    fn doubling_without_jitter_is_exact() {
        let reconnect = Backoff::doubling(Duration::from_millis(400), Duration::from_secs(5));
        let waits: Vec<u128> = (1..=6).map(|n| reconnect.delay(n).as_millis()).collect();
        assert_eq!(waits, [400, 800, 1600, 3200, 5000, 5000]);
    }
}
