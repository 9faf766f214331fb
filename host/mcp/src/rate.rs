//! Sliding-window rate limits: one for a single counter, and one per client
//! address, so one address's flood or failures never count against another
//! (and so never lock the owner out).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Addresses remembered at once by a [`PerAddress`]; past this, the quietest
/// are forgotten, so a spread of addresses cannot grow it without bound.
const MAX_ADDRESSES: usize = 4096;

/// The client an address stands for: an IPv4 address (also written as an
/// IPv4-mapped IPv6 one, as a dual-stack socket reports it), or an IPv6
/// address's /64, the smallest block one subscriber is given, so a client
/// cannot take a fresh limit with each of its 2^64 addresses.
pub fn client(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut s = v6.segments();
                s[4..].fill(0);
                IpAddr::V6(s.into())
            }
        },
    }
}

/// A sliding-window rate limit: at most `max` events in any `window`.
#[derive(Clone, Debug)]
pub struct RateLimit {
    max: usize,
    window: Duration,
    hits: VecDeque<Instant>,
}

impl RateLimit {
    /// At most `max` events in any `window`.
    pub fn new(max: usize, window: Duration) -> RateLimit {
        RateLimit { max, window, hits: VecDeque::with_capacity(max) }
    }

    fn forget(&mut self, now: Instant) {
        while self.hits.front().is_some_and(|t| now.saturating_duration_since(*t) >= self.window) {
            self.hits.pop_front();
        }
    }

    /// Whether one more event may happen now, without counting it.
    ///
    /// # Errors
    ///
    /// How long until one may.
    pub fn check(&mut self, now: Instant) -> Result<(), Duration> {
        self.forget(now);
        match self.hits.front() {
            Some(oldest) if self.hits.len() >= self.max => Err((*oldest + self.window).saturating_duration_since(now)),
            _ => Ok(()),
        }
    }

    /// Counts one event, whether or not it was allowed.
    pub fn record(&mut self, now: Instant) {
        self.forget(now);
        if self.hits.len() >= self.max {
            self.hits.pop_front();
        }
        self.hits.push_back(now);
    }

    /// Counts one event if it is allowed.
    ///
    /// # Errors
    ///
    /// How long until one may.
    pub fn hit(&mut self, now: Instant) -> Result<(), Duration> {
        self.check(now)?;
        self.record(now);
        Ok(())
    }
}

/// A [`RateLimit`] for each client, as [`client`] keys it.
#[derive(Debug)]
pub struct PerAddress {
    max: usize,
    window: Duration,
    addresses: HashMap<IpAddr, (RateLimit, Instant)>,
}

impl PerAddress {
    /// At most `max` events from one address in any `window`.
    pub fn new(max: usize, window: Duration) -> PerAddress {
        PerAddress { max, window, addresses: HashMap::new() }
    }

    /// `ip`'s limit, made room for and touched at `now`.
    fn of(&mut self, ip: IpAddr, now: Instant) -> &mut RateLimit {
        let ip = client(ip);
        if self.addresses.len() >= MAX_ADDRESSES && !self.addresses.contains_key(&ip) {
            let window = self.window;
            self.addresses.retain(|_, (_, last)| now.saturating_duration_since(*last) < window);
            if self.addresses.len() >= MAX_ADDRESSES
                && let Some(quietest) = self.addresses.iter().min_by_key(|(_, (_, last))| *last).map(|(ip, _)| *ip)
            {
                self.addresses.remove(&quietest);
            }
        }
        let (max, window) = (self.max, self.window);
        let (limit, last) = self.addresses.entry(ip).or_insert_with(|| (RateLimit::new(max, window), now));
        *last = now;
        limit
    }

    /// Whether `ip` may have one more event now, without counting it.
    ///
    /// # Errors
    ///
    /// How long until it may.
    pub fn check(&mut self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        match self.addresses.get_mut(&client(ip)) {
            Some((limit, _)) => limit.check(now),
            None => Ok(()),
        }
    }

    /// Counts one event from `ip`, whether or not it was allowed.
    pub fn record(&mut self, ip: IpAddr, now: Instant) {
        self.of(ip, now).record(now);
    }

    /// Counts one event from `ip` if it is allowed.
    ///
    /// # Errors
    ///
    /// How long until `ip` may.
    pub fn hit(&mut self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        self.of(ip, now).hit(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_window_slides() {
        let t0 = Instant::now();
        let mut r = RateLimit::new(2, Duration::from_secs(10));
        r.hit(t0).expect("1");
        r.hit(t0 + Duration::from_secs(4)).expect("2");
        assert_eq!(r.hit(t0 + Duration::from_secs(5)), Err(Duration::from_secs(5)));
        assert_eq!(r.check(t0 + Duration::from_secs(9)), Err(Duration::from_secs(1)));
        r.hit(t0 + Duration::from_secs(10)).expect("the first left the window");
        assert_eq!(r.check(t0 + Duration::from_secs(10)), Err(Duration::from_secs(4)));
        r.record(t0 + Duration::from_secs(11));
        assert_eq!(r.hits.len(), 2, "recording past the limit keeps only the last `max`");
    }

    #[test]
    fn one_address_is_limited_and_another_is_not() {
        let window = Duration::from_secs(60);
        let mut p = PerAddress::new(30, window);
        let now = Instant::now();
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().expect("ip"), "192.0.2.2".parse().expect("ip"));
        for _ in 0..30 {
            p.hit(a, now).expect("within the limit");
        }
        assert_eq!(p.hit(a, now), Err(window));
        assert_eq!(p.check(a, now), Err(window));
        p.check(b, now).expect("another address");
        p.hit(b, now).expect("another address");
        p.hit(a, now + window).expect("the window slid");
        p.record(b, now + window);
        for i in 0..MAX_ADDRESSES as u32 + 10 {
            let _ = p.hit(IpAddr::from(i.to_be_bytes()), now);
        }
        assert!(p.addresses.len() <= MAX_ADDRESSES);
    }

    #[test]
    fn an_ipv6_client_is_its_64_and_a_mapped_ipv4_one_its_address() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(client(ip("192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(client(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(client(ip("::ffff:127.0.0.1")), ip("127.0.0.1"));
        assert_eq!(client(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")), ip("2001:db8:1:2::"));
        assert_eq!(client(ip("::1")), ip("::"), "loopback is checked before, on the address itself");
        // One /64 shares a limit; the next /64 has its own.
        let window = Duration::from_secs(60);
        let mut p = PerAddress::new(2, window);
        let now = Instant::now();
        p.hit(ip("2001:db8:1:2::1"), now).expect("1");
        p.hit(ip("2001:db8:1:2::2"), now).expect("2");
        assert_eq!(p.hit(ip("2001:db8:1:2:ffff::3"), now), Err(window));
        assert_eq!(p.check(ip("2001:db8:1:2::4"), now), Err(window));
        p.hit(ip("2001:db8:1:3::1"), now).expect("another /64");
    }
}
