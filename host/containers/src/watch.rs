//! The engine's event stream, as proof that a container has not changed.
//!
//! A session's container is read back before each call. Reading it back is a round
//! trip to the engine (milliseconds); a call to a resident agent takes less. The
//! engine announces every change to a container as an event (`update`, `pause`,
//! `die`, `oom`, `kill`, `destroy`, `exec_*`, a network's `connect`, ...), so the
//! host follows the stream and counts the events that name each followed
//! container. A read-back stamps the count; while the stream is live and the count
//! is unchanged, nothing was announced, and the next call need not read back
//! again. Any event that names the container, a restart of the stream, or a stream
//! that is down means a full read-back.
//!
//! What this proves is what the read-back before each call proved: no change the
//! engine applied before the check. The engine announces a change as it applies
//! it, but the announcement can still be in our socket, unread, when a call comes
//! (a loaded host schedules the follower late), so each check is a barrier: the
//! follower first reads every event already there, and only then is the count
//! compared. A follower that does not answer within [`BARRIER`] vouches for
//! nothing. A change during a call was, and is, caught at the next call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bollard::models::{EventMessage, EventMessageTypeEnum};
use futures_util::StreamExt as _;

use crate::engine::Engine;

/// How long a (re)opened stream must stay up before it vouches for anything: the
/// engine subscribes it just after it answers, and replays what happened since
/// [`REPLAY`] before the request, so by then nothing is left unseen.
const SETTLE: Duration = Duration::from_secs(1);
/// How far back a (re)opened stream asks the engine to replay events.
const REPLAY: Duration = Duration::from_secs(5);
/// The pause before reopening a stream that failed.
const RETRY: Duration = Duration::from_millis(500);
/// How long a check waits for the follower to read what has arrived.
const BARRIER: Duration = Duration::from_millis(100);

/// A check's request to the follower: answer once every event already
/// readable is counted.
type Ping = std::sync::mpsc::SyncSender<()>;

/// A followed container's state of announcements at a read-back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Which opening of the stream counted.
    epoch: u64,
    /// Events that named the container so far.
    count: u64,
}

#[derive(Debug, Default)]
struct State {
    epoch: u64,
    /// When the current stream vouches from; None while it is down.
    live_from: Option<Instant>,
    counts: HashMap<String, u64>,
}

/// The event stream, followed in the background for as long as the watch lives.
#[derive(Debug)]
pub struct Watch {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
    pings: tokio::sync::mpsc::UnboundedSender<Ping>,
}

impl Watch {
    /// Starts following the engine's events on `rt`.
    pub fn start(engine: Engine, rt: &tokio::runtime::Handle) -> Watch {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        let (pings, mut asked) = tokio::sync::mpsc::unbounded_channel();
        let task = rt.spawn(async move {
            loop {
                let since = crate::now_unix().saturating_sub(REPLAY.as_secs());
                let events = engine.events(since);
                lock(&shared).reopened(Instant::now() + SETTLE);
                follow(events, &shared, &mut asked).await;
                lock(&shared).down();
                tokio::time::sleep(RETRY).await;
            }
        });
        Watch { state, task, pings }
    }

    /// Starts counting the events that name container `id`.
    pub fn follow(&self, id: &str) {
        lock(&self.state).counts.entry(id.to_string()).or_insert(0);
    }

    /// Stops counting for `id`.
    pub fn forget(&self, id: &str) {
        lock(&self.state).counts.remove(id);
    }

    /// The stamp to keep with a read-back of `id` taken now: take it before the
    /// read-back, so an event during the read-back voids it. None when the stream
    /// cannot vouch now or `id` is not followed.
    pub fn stamp(&self, id: &str) -> Option<Stamp> {
        lock(&self.state).stamp(id, Instant::now())
    }

    /// Nothing was announced about `id` since `stamp`, and the stream was up all
    /// along; never without a stamp. Blocks (at most [`BARRIER`]) until the
    /// follower has counted every event already delivered; call it off the
    /// runtime's worker threads.
    pub fn unchanged(&self, id: &str, stamp: Option<Stamp>) -> bool {
        stamp.is_some() && self.caught_up() && self.stamp(id) == stamp
    }

    /// Whether the follower has read every event delivered so far.
    fn caught_up(&self) -> bool {
        let (reply, answered) = std::sync::mpsc::sync_channel(1);
        self.pings.send(reply).is_ok() && answered.recv_timeout(BARRIER).is_ok()
    }
}

/// Counts `events` into `shared` until the stream ends, answering each ping
/// once no event is waiting to be read.
async fn follow<E>(
    events: impl futures_util::Stream<Item = Result<EventMessage, E>>,
    shared: &Mutex<State>,
    asked: &mut tokio::sync::mpsc::UnboundedReceiver<Ping>,
) {
    let mut events = Box::pin(events);
    loop {
        tokio::select! {
            // Every event already readable is counted before a ping is answered.
            biased;
            ev = events.next() => match ev {
                Some(Ok(ev)) => lock(shared).saw(&ev),
                _ => return,
            },
            Some(ping) = asked.recv() => {
                let _ = ping.try_send(());
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl State {
    fn reopened(&mut self, live_from: Instant) {
        self.epoch += 1;
        self.live_from = Some(live_from);
    }

    fn down(&mut self) {
        self.epoch += 1;
        self.live_from = None;
    }

    fn saw(&mut self, ev: &EventMessage) {
        if ev.typ == Some(EventMessageTypeEnum::DAEMON) {
            // The engine itself changed (a reload): nothing it vouched for holds.
            self.epoch += 1;
            return;
        }
        let Some(actor) = &ev.actor else { return };
        let named = actor.id.iter().chain(actor.attributes.iter().flat_map(|a| a.get("container")));
        for id in named {
            if let Some(n) = self.counts.get_mut(id) {
                *n += 1;
            }
        }
    }

    fn stamp(&self, id: &str, now: Instant) -> Option<Stamp> {
        if self.live_from.is_none_or(|t| now < t) {
            return None;
        }
        self.counts.get(id).map(|&count| Stamp { epoch: self.epoch, count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::EventActor;

    fn event(typ: EventMessageTypeEnum, id: &str, container_attr: Option<&str>) -> EventMessage {
        let attributes = container_attr.map(|c| HashMap::from([("container".to_string(), c.to_string())]));
        EventMessage {
            typ: Some(typ),
            actor: Some(EventActor { id: Some(id.into()), attributes }),
            ..EventMessage::default()
        }
    }

    #[test]
    fn a_stamp_holds_until_an_event_names_the_container_or_the_stream_restarts() {
        let t0 = Instant::now();
        let mut s = State::default();
        s.follow_for_test("c1");
        assert_eq!(s.stamp("c1", t0), None, "no stream yet");
        s.reopened(t0 + SETTLE);
        assert_eq!(s.stamp("c1", t0), None, "a new stream vouches only once settled");
        let later = t0 + SETTLE;
        let st = s.stamp("c1", later).expect("stamp");
        assert_eq!(s.stamp("unfollowed", later), None);
        s.saw(&event(EventMessageTypeEnum::CONTAINER, "other", None));
        assert_eq!(s.stamp("c1", later), Some(st), "another container's event");
        s.saw(&event(EventMessageTypeEnum::NETWORK, "net1", Some("c1")));
        let st2 = s.stamp("c1", later).expect("stamp");
        assert_ne!(st2, st, "a network event naming the container");
        s.saw(&event(EventMessageTypeEnum::CONTAINER, "c1", None));
        let st3 = s.stamp("c1", later).expect("stamp");
        assert_ne!(st3, st2, "an event on the container");
        s.saw(&event(EventMessageTypeEnum::DAEMON, "engine", None));
        assert_ne!(s.stamp("c1", later), Some(st3), "a daemon event voids every stamp");
        let st4 = s.stamp("c1", later).expect("stamp");
        s.down();
        assert_eq!(s.stamp("c1", later), None, "a stream that is down vouches for nothing");
        s.reopened(later);
        assert_ne!(s.stamp("c1", later), Some(st4), "a reopened stream voids every stamp");
    }

    /// The barrier: an event delivered before a check is counted before the
    /// check compares, however late the follower is scheduled.
    #[test]
    fn a_check_waits_for_the_events_already_delivered() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
        let shared = Arc::new(Mutex::new(State::default()));
        lock(&shared).follow_for_test("c1");
        lock(&shared).reopened(Instant::now());
        let (feed, events) = tokio::sync::mpsc::unbounded_channel::<Result<EventMessage, ()>>();
        let (pings, mut asked) = tokio::sync::mpsc::unbounded_channel();
        let state = Arc::clone(&shared);
        let task = rt.spawn(async move {
            let events = futures_util::stream::unfold(events, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
            follow(events, &state, &mut asked).await;
        });
        let watch = Watch { state: shared, task, pings };
        let before = watch.stamp("c1");
        assert!(watch.unchanged("c1", before), "nothing announced");
        for _ in 0..50 {
            let before = watch.stamp("c1");
            feed.send(Ok(event(EventMessageTypeEnum::CONTAINER, "c1", None))).expect("feed");
            assert!(!watch.unchanged("c1", before), "an event delivered before the check is counted");
        }
        drop(feed);
        let after = watch.stamp("c1");
        std::thread::sleep(Duration::from_millis(50));
        assert!(!watch.unchanged("c1", after), "a follower that has stopped vouches for nothing");
    }

    impl State {
        fn follow_for_test(&mut self, id: &str) {
            self.counts.insert(id.into(), 0);
        }
    }
}
