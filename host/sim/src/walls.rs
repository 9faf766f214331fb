//! The walls around every guest store a simulation run makes: a linear-memory cap,
//! an epoch deadline, and the classification of a call that did not return.

use std::time::Duration;

use wasmtime::{Engine, ResourceLimiter, Store, Trap};

/// The memory cap and deadline granularity of one kind of guest store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walls {
    /// Linear memory per store, in bytes.
    pub memory_bytes: usize,
    /// How often the engine's epoch advances (the caller's ticker); every deadline
    /// is rounded up to it.
    pub epoch_tick: Duration,
}

impl Walls {
    /// A plant's walls when nothing else is set: 64 MiB (the largest plant, the
    /// double slit, needs well under 1 MiB) at a 5 ms epoch.
    pub const PLANT: Walls = Walls { memory_bytes: 64 << 20, epoch_tick: Duration::from_millis(5) };

    /// Epoch ticks for a deadline `budget` from now, rounded up, plus one so a
    /// deadline never fires early.
    pub fn ticks(&self, budget: Duration) -> u64 {
        let tick = self.epoch_tick.as_nanos().max(1);
        (budget.as_nanos().div_ceil(tick) as u64).saturating_add(1)
    }

    /// A fresh store holding only the memory cap, its deadline `budget` from now.
    pub fn store(&self, engine: &Engine, budget: Duration) -> Store<Cap> {
        let mut store = Store::new(engine, Cap::new(self.memory_bytes, *self));
        store.limiter(|c| c);
        Walls::set_deadline(&mut store, budget);
        store.epoch_deadline_trap();
        store
    }

    /// Moves a store's deadline to `budget` from now.
    pub fn set_deadline<T: AsCap>(store: &mut Store<T>, budget: Duration) {
        let ticks = store.data().cap().walls.ticks(budget);
        store.set_epoch_deadline(ticks);
    }
}

/// Caps linear memory and remembers whether a guest asked past the cap.
#[derive(Debug)]
pub struct Cap {
    walls: Walls,
    denied: bool,
}

impl Cap {
    /// A cap of `memory_bytes` under `walls`.
    pub fn new(memory_bytes: usize, walls: Walls) -> Cap {
        Cap { walls: Walls { memory_bytes, ..walls }, denied: false }
    }

    /// Whether a growth past the cap was refused.
    pub fn denied(&self) -> bool {
        self.denied
    }
}

impl ResourceLimiter for Cap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.walls.memory_bytes {
            self.denied = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        // Tables hold function references; a million is far past any real guest.
        Ok(desired <= 1 << 20)
    }
}

/// A store state that carries a [`Cap`].
pub trait AsCap {
    /// The store's cap.
    fn cap(&self) -> &Cap;
}

impl AsCap for Cap {
    fn cap(&self) -> &Cap {
        self
    }
}

/// How a guest call that did not return ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stopped {
    /// Its deadline passed.
    #[error("ran past its deadline")]
    Deadline,
    /// It asked for more linear memory than its cap.
    #[error("ran out of memory (the limit is {0} MiB)")]
    OutOfMemory(usize),
    /// Any other trap, with wasmtime's words for it.
    #[error("trapped: {0}")]
    Trap(String),
}

impl Stopped {
    /// Classifies the error of a call into the guest of `store`.
    pub fn of<T: AsCap>(e: &wasmtime::Error, store: &Store<T>) -> Stopped {
        let cap = store.data().cap();
        if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            return Stopped::Deadline;
        }
        if cap.denied {
            return Stopped::OutOfMemory(cap.walls.memory_bytes >> 20);
        }
        match e.downcast_ref::<Trap>() {
            Some(t) => Stopped::Trap(t.to_string().trim_start_matches("wasm trap: ").to_string()),
            None => Stopped::Trap(format!("{e:#}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_never_fire_early() {
        let w = Walls::PLANT;
        assert_eq!(w.ticks(Duration::ZERO), 1);
        assert_eq!(w.ticks(Duration::from_millis(5)), 2);
        assert_eq!(w.ticks(Duration::from_millis(6)), 3);
        assert_eq!(w.ticks(Duration::from_secs(2)), 401);
    }
}
