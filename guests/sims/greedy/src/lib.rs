//! Greedy, a test fixture rather than a model: a row asks for p0 MiB, which it takes
//! one 1 MiB chunk at a time (touching each chunk's last byte), then writes one step
//! whose output echoes p1. It proves the host's per-instance memory cap: a row that
//! asks for more than the cap fails alone with -7 while the rows around it complete.
//! See README.md.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use plimsoll_sim_kit::model::TableModel;
use plimsoll_sim_kit::model_bindings::exports::plimsoll::sim::model::Description;

/// The size of one chunk, bytes (1 MiB).
pub const CHUNK: usize = 1 << 20;
/// The code for `max_steps < 1`.
pub const NO_STEPS: i32 = -1;
/// The code for a row whose parameters are not three values.
pub const BAD_PARAMETERS: i32 = -2;
/// The code for an allocation the instance's memory cannot satisfy.
pub const OUT_OF_MEMORY: i32 = -7;

/// One chunk of [`CHUNK`] bytes, or `None` when the allocator refuses it.
fn chunk() -> Option<Vec<u8>> {
    let mut c = Vec::new();
    c.try_reserve_exact(CHUNK).ok()?;
    c.resize(CHUNK, 0);
    Some(c)
}

/// Takes `mib` chunks from `take`, one by one, tagging the last byte of chunk i with
/// `i as u8`, and counts the chunks whose tag reads back.
///
/// # Errors
///
/// [`OUT_OF_MEMORY`] as soon as `take` (or the list of chunks) cannot grow; what was
/// taken is dropped.
pub fn hog(mib: i32, mut take: impl FnMut() -> Option<Vec<u8>>) -> Result<i32, i32> {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    for i in 0..mib.max(0) {
        let mut c = take().ok_or(OUT_OF_MEMORY)?;
        if let Some(last) = c.last_mut() {
            *last = i as u8;
        }
        chunks.try_reserve(1).map_err(|_| OUT_OF_MEMORY)?;
        chunks.push(c);
    }
    // Walk what was taken, reading each tag back so the allocations stay real.
    let chunks = core::hint::black_box(chunks);
    let walked = chunks.iter().enumerate().filter(|(i, c)| c.last() == Some(&(*i as u8))).count();
    Ok(walked as i32)
}

/// The module-run export: the original's Greedy `sim_run`.
#[derive(Debug)]
pub struct Greedy;

impl Greedy {
    /// Runs one row with `take` as the allocator of chunks.
    ///
    /// # Errors
    ///
    /// [`NO_STEPS`] when `max_steps < 1`, [`BAD_PARAMETERS`] when the row is not three
    /// values, [`OUT_OF_MEMORY`] when a chunk cannot be had.
    pub fn run_with(
        parameters: &[f64],
        max_steps: u32,
        take: impl FnMut() -> Option<Vec<u8>>,
    ) -> Result<Vec<f64>, i32> {
        if max_steps < 1 {
            return Err(NO_STEPS);
        }
        let [p0, p1, _p2]: [f64; 3] = parameters.try_into().map_err(|_| BAD_PARAMETERS)?;
        // C's `(long)p0`: truncated toward zero (32-bit; out of range saturates).
        let mib = p0 as i32;
        let walked = hog(mib, take)?;
        Ok(vec![if walked == mib { p1 } else { -1.0 }])
    }
}

impl TableModel for Greedy {
    fn describe() -> Description {
        Description {
            name: "Greedy".to_string(),
            parameters: ["mib", "echo", "unused"].iter().map(|s| s.to_string()).collect(),
            outputs: vec!["echo".to_string()],
        }
    }

    fn run(parameters: &[f64], _end: f64, _step: f64, max_steps: u32) -> Result<Vec<f64>, i32> {
        Greedy::run_with(parameters, max_steps, chunk)
    }
}

plimsoll_sim_kit::model!(Greedy);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_mib_succeed_and_echo_p1() {
        assert_eq!(Greedy::run(&[4.0, 2.5, 0.0], 1.0, 1.0, 1), Ok(vec![2.5]));
        assert_eq!(Greedy::run(&[4.9, -3.0, 7.0], 1.0, 1.0, 1), Ok(vec![-3.0]));
    }

    #[test]
    fn zero_and_fractions_take_nothing_negative_writes_minus_one() {
        assert_eq!(Greedy::run(&[0.0, 9.0, 0.0], 1.0, 1.0, 5), Ok(vec![9.0]));
        assert_eq!(Greedy::run(&[0.7, 9.0, 0.0], 1.0, 1.0, 5), Ok(vec![9.0]));
        assert_eq!(Greedy::run(&[-0.7, 9.0, 0.0], 1.0, 1.0, 5), Ok(vec![9.0]));
        assert_eq!(Greedy::run(&[-2.0, 9.0, 0.0], 1.0, 1.0, 5), Ok(vec![-1.0]));
    }

    #[test]
    fn no_steps_is_minus_one_and_a_short_row_minus_two() {
        assert_eq!(Greedy::run(&[1.0, 9.0, 0.0], 1.0, 1.0, 0), Err(NO_STEPS));
        assert_eq!(Greedy::run(&[1.0, 9.0], 1.0, 1.0, 1), Err(BAD_PARAMETERS));
    }

    /// An allocator with a budget of `mib` chunks, as a capped instance would be.
    fn budget(mut left: u32) -> impl FnMut() -> Option<Vec<u8>> {
        move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            Some(vec![0; 16])
        }
    }

    #[test]
    fn a_refused_chunk_fails_with_minus_seven() {
        assert_eq!(Greedy::run_with(&[8.0, 1.0, 0.0], 1, budget(15)), Ok(vec![1.0]));
        assert_eq!(Greedy::run_with(&[15.0, 1.0, 0.0], 1, budget(15)), Ok(vec![1.0]));
        assert_eq!(Greedy::run_with(&[16.0, 1.0, 0.0], 1, budget(15)), Err(OUT_OF_MEMORY));
        assert_eq!(Greedy::run_with(&[1e12, 1.0, 0.0], 1, budget(15)), Err(OUT_OF_MEMORY));
    }

    #[test]
    fn describes_itself() {
        let d = Greedy::describe();
        assert_eq!(d.name, "Greedy");
        assert_eq!(d.outputs, ["echo"]);
    }
}
