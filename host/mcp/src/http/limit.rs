//! Per-client rate limits on what anyone may ask before signing in (passkey
//! ceremonies, client registration, authorization requests), so one client's
//! flood neither locks the owner out nor keeps other clients from connecting.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::passkey::RateLimit;

/// Requests one address may make per [`WINDOW`] to the limited routes.
pub const PER_CLIENT: usize = 30;
/// The sliding window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at once; past this, the quietest are forgotten.
const MAX_CLIENTS: usize = 4096;

/// The limits, one per address.
#[derive(Debug, Default)]
pub struct PerClient {
    clients: HashMap<IpAddr, (RateLimit, Instant)>,
}

impl PerClient {
    /// Counts a request from `ip`.
    ///
    /// # Errors
    ///
    /// How long until `ip` may ask again.
    pub fn hit(&mut self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        if self.clients.len() >= MAX_CLIENTS && !self.clients.contains_key(&ip) {
            self.clients.retain(|_, (_, last)| now.duration_since(*last) < WINDOW);
            if self.clients.len() >= MAX_CLIENTS
                && let Some(quietest) = self.clients.iter().min_by_key(|(_, (_, last))| *last).map(|(ip, _)| *ip)
            {
                self.clients.remove(&quietest);
            }
        }
        let (limit, last) = self.clients.entry(ip).or_insert_with(|| (RateLimit::new(PER_CLIENT, WINDOW), now));
        *last = now;
        limit.hit(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_is_limited_and_another_is_not() {
        let mut p = PerClient::default();
        let now = Instant::now();
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().expect("ip"), "192.0.2.2".parse().expect("ip"));
        for _ in 0..PER_CLIENT {
            p.hit(a, now).expect("within the limit");
        }
        assert_eq!(p.hit(a, now), Err(WINDOW));
        p.hit(b, now).expect("another address");
        p.hit(a, now + WINDOW).expect("the window slid");
        for i in 0..MAX_CLIENTS as u32 + 10 {
            let _ = p.hit(IpAddr::from(i.to_be_bytes()), now);
        }
        assert!(p.clients.len() <= MAX_CLIENTS);
    }
}
