//! The release limiter's arithmetic: a token bucket with a sustained rate and a burst (the
//! QPS/burst convention of client-go). The bucket starts full, so a burst of pods that arrive
//! at once is released without waiting; after that, releases follow the sustained rate.
//!
//! Pure: the caller passes the clock in, so tests step time by hand and never sleep.

use std::time::{Duration, Instant};

/// Why a bucket cannot be built; each message names the flag and the accepted forms.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BucketError {
    #[error("release rate {0} is not a number > 0 (pods per second, e.g. 50)")]
    Rate(f64),
    #[error("release burst {0} is not a whole number >= 1 (pods released at once, e.g. 1000)")]
    Burst(u32),
}

/// A checked rate and burst: built only through [`ReleaseLimit::new`], so a bucket is never
/// built from a rate or burst that makes no sense.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReleaseLimit {
    rate: f64,
    burst: u32,
}

impl ReleaseLimit {
    pub fn new(rate: f64, burst: u32) -> Result<Self, BucketError> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(BucketError::Rate(rate));
        }
        if burst == 0 {
            return Err(BucketError::Burst(burst));
        }
        Ok(Self { rate, burst })
    }

    /// Sustained releases per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Releases allowed at once from a full bucket.
    pub fn burst(&self) -> u32 {
        self.burst
    }
}

/// Tokens are pods; one token is spent per release.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    /// Tokens at `updated`. Negative while releases wait for tokens not yet refilled: each
    /// wait is a reservation, so callers that take in turn are spaced by `1 / rate`.
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`: `burst` tokens, refilled at `rate` tokens per second.
    pub fn new(limit: ReleaseLimit, now: Instant) -> Self {
        let burst = f64::from(limit.burst);
        Self {
            rate: limit.rate,
            burst,
            tokens: burst,
            updated: now,
        }
    }

    /// Adds the tokens refilled since the last update, up to the burst. A clock that goes
    /// backwards adds nothing.
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.updated = self.updated.max(now);
    }

    /// Takes one token at `now` and returns how long the caller must wait before using it:
    /// zero while the bucket holds a token.
    pub fn take(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }

    /// Tokens available at `now` (negative while reservations are outstanding).
    pub fn available(&mut self, now: Instant) -> f64 {
        self.refill(now);
        self.tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn full_bucket(rate: f64, burst: u32, now: Instant) -> TokenBucket {
        TokenBucket::new(ReleaseLimit::new(rate, burst).unwrap(), now)
    }

    /// Durations from float seconds may be a nanosecond off.
    fn near(a: Duration, b: Duration) -> bool {
        a.abs_diff(b) <= Duration::from_micros(1)
    }

    #[test]
    fn a_full_bucket_releases_the_whole_burst_at_once() {
        let t0 = Instant::now();
        let mut bucket = full_bucket(50.0, 1000, t0);
        for _ in 0..1000 {
            assert_eq!(bucket.take(t0), Duration::ZERO);
        }
        // The 1,001st waits one interval of the sustained rate (20 ms at 50/s), the next two.
        assert!(near(bucket.take(t0), ms(20)));
        assert!(near(bucket.take(t0), ms(40)));
    }

    #[test]
    fn burst_of_one_is_the_flat_rate() {
        let t0 = Instant::now();
        let mut bucket = full_bucket(50.0, 1, t0);
        assert_eq!(bucket.take(t0), Duration::ZERO);
        let waits: Vec<Duration> = (0..4).map(|_| bucket.take(t0)).collect();
        for (wait, want) in waits.iter().zip([20, 40, 60, 80]) {
            assert!(near(*wait, ms(want)), "{waits:?}");
        }
        // 1,000 pods at once: the last one waits 999 intervals, ~20 s.
        let mut bucket = full_bucket(50.0, 1, t0);
        let last = (0..1000).map(|_| bucket.take(t0)).last().unwrap();
        assert!(
            near(last, Duration::from_secs_f64(999.0 / 50.0)),
            "{last:?}"
        );
    }

    #[test]
    fn refills_at_the_rate_and_never_beyond_the_burst() {
        let t0 = Instant::now();
        let mut bucket = full_bucket(10.0, 5, t0);
        for _ in 0..5 {
            bucket.take(t0);
        }
        assert_eq!(bucket.available(t0), 0.0);
        // 300 ms at 10/s refills three tokens.
        let t1 = t0 + ms(300);
        assert!((bucket.available(t1) - 3.0).abs() < 1e-9);
        // An hour later the bucket holds the burst, not 36,000 tokens.
        let t2 = t1 + Duration::from_secs(3600);
        assert_eq!(bucket.available(t2), 5.0);
        for _ in 0..5 {
            assert_eq!(bucket.take(t2), Duration::ZERO);
        }
        assert!(near(bucket.take(t2), ms(100)));
    }

    #[test]
    fn waiting_callers_are_spaced_by_the_rate() {
        // A caller that waits what `take` says, then takes again, releases at exactly the rate
        // once the burst is spent.
        let t0 = Instant::now();
        let mut bucket = full_bucket(4.0, 2, t0);
        let mut now = t0;
        let mut released = Vec::new();
        for _ in 0..6 {
            now += bucket.take(now);
            released.push(now.duration_since(t0));
        }
        for (at, want) in released.iter().zip([0, 0, 250, 500, 750, 1000]) {
            assert!(near(*at, ms(want)), "{released:?}");
        }
    }

    #[test]
    fn a_clock_going_backwards_adds_no_tokens() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut bucket = full_bucket(1.0, 1, t0);
        bucket.take(t0);
        let earlier = t0 - Duration::from_secs(5);
        assert_eq!(bucket.available(earlier), 0.0);
        assert!(near(bucket.take(earlier), Duration::from_secs(1)));
    }

    #[test]
    fn bad_rate_or_burst_is_refused_with_the_accepted_forms() {
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = ReleaseLimit::new(rate, 10).unwrap_err();
            assert!(err.to_string().contains("number > 0"), "{err}");
        }
        let err = ReleaseLimit::new(50.0, 0).unwrap_err();
        assert_eq!(err, BucketError::Burst(0));
        assert!(err.to_string().contains(">= 1"), "{err}");
    }
}
