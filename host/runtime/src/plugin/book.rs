//! What a remote plugin's sandboxes are, as the host saw them made: those of the
//! calls in flight (which a sweep keeps), and those whose call ended without the
//! host seeing them deleted (a failed delete), which hold capacity until a sweep
//! deletes them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

/// The book of one remote provider.
#[derive(Debug, Default)]
pub struct Book {
    next: AtomicU64,
    calls: Mutex<BTreeMap<u64, Vec<String>>>,
    undeleted: Mutex<BTreeSet<String>>,
    /// Raised whenever a call's end leaves a sandbox undeleted, for the releaser.
    left: Mutex<bool>,
    left_now: Condvar,
    /// Held shared by each write a call sends until what it made is booked, and
    /// whole by a sweep: a sweep never sees a sandbox whose create is in flight.
    writes: RwLock<()>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Book {
    /// Held while one write is sent and what it made is booked.
    pub fn writing(&self) -> RwLockReadGuard<'_, ()> {
        self.writes.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Held for a whole sweep: no write of any call is in flight meanwhile.
    pub fn sweeping(&self) -> RwLockWriteGuard<'_, ()> {
        self.writes.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A call starts; returns its number.
    pub fn begin(&self) -> u64 {
        let call = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.calls).insert(call, Vec::new());
        call
    }

    /// Call `call` made `targets`.
    pub fn made(&self, call: u64, targets: &[String]) {
        if let Some(t) = lock(&self.calls).get_mut(&call) {
            t.extend_from_slice(targets);
        }
    }

    /// Call `call` ended; what it made that `exists` still says exists is undeleted.
    pub fn end(&self, call: u64, exists: impl Fn(&str) -> bool) {
        let made = lock(&self.calls).remove(&call).unwrap_or_default();
        let left: Vec<String> = made.into_iter().filter(|t| exists(t)).collect();
        if !left.is_empty() {
            lock(&self.undeleted).extend(left);
            *lock(&self.left) = true;
            self.left_now.notify_all();
        }
    }

    /// Waits up to `timeout` for a call to end leaving a sandbox undeleted since
    /// the last wait that saw one; whether one did.
    pub fn wait_left(&self, timeout: Duration) -> bool {
        let flag = lock(&self.left);
        let (mut flag, _) = self
            .left_now
            .wait_timeout_while(flag, timeout, |raised| !*raised)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::replace(&mut *flag, false)
    }

    /// What the calls in flight made: a sweep must keep these.
    pub fn in_flight(&self) -> Vec<String> {
        lock(&self.calls).values().flatten().cloned().collect()
    }

    /// How many calls are in flight.
    pub fn calls(&self) -> usize {
        lock(&self.calls).len()
    }

    /// Sandboxes whose call ended without the host seeing them deleted: a delete
    /// that failed, or one left to the releaser.
    pub fn undeleted(&self) -> Vec<String> {
        lock(&self.undeleted).iter().cloned().collect()
    }

    /// After a sweep: keeps only the undeleted that `exists` still says exist.
    pub fn settle(&self, exists: impl Fn(&str) -> bool) {
        lock(&self.undeleted).retain(|t| exists(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_releaser_wakes_only_for_a_call_that_left_a_sandbox() {
        let book = Book::default();
        let a = book.begin();
        book.end(a, |_| true);
        assert!(!book.wait_left(Duration::from_millis(10)), "it made nothing");
        let b = book.begin();
        book.made(b, &["s1".into()]);
        book.end(b, |_| true);
        assert!(book.wait_left(Duration::from_secs(5)));
        assert!(!book.wait_left(Duration::from_millis(10)), "seen once");
    }

    #[test]
    fn a_call_keeps_what_it_made_until_it_ends_and_a_failed_delete_stays_until_settled() {
        let book = Book::default();
        let a = book.begin();
        let b = book.begin();
        book.made(a, &["s1".into()]);
        book.made(b, &["s2".into(), "s3".into()]);
        assert_eq!((book.calls(), book.in_flight().len()), (2, 3));
        // a's sandbox was deleted; b's s3 was not.
        book.end(a, |_| false);
        book.end(b, |t| t == "s3");
        assert_eq!((book.calls(), book.in_flight(), book.undeleted()), (0, vec![], vec!["s3".to_string()]));
        book.settle(|_| true);
        assert_eq!(book.undeleted(), ["s3"]);
        book.settle(|_| false);
        assert!(book.undeleted().is_empty());
    }

    #[test]
    fn a_sweep_waits_for_every_write_in_flight_and_writes_wait_for_a_sweep() {
        let book = Book::default();
        let writing = book.writing();
        let also = book.writing();
        assert!(book.writes.try_write().is_err(), "a sweep went ahead of a write in flight");
        drop((writing, also));
        let sweeping = book.sweeping();
        assert!(book.writes.try_read().is_err(), "a write went ahead of a sweep");
        drop(sweeping);
        assert!(book.writes.try_read().is_ok());
    }
}
