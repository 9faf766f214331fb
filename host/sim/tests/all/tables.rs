//! Module tables on the real model components: the original's published checksums,
//! the memory fixture, and the worker's refusals.

use std::time::{Duration, Instant};

use plimsoll_sim::ModelName;
use plimsoll_sim::model::{self, RESULT_BUDGET};
use sha2::{Digest, Sha256};

use crate::support::library;

/// The original tests' sweep: `p0 = min + ((max - min) * i) / (n - 1)`.
fn sweep(n: usize, min: f64, max: f64, p1: f64, p2: f64) -> Vec<Vec<f64>> {
    (0..n).map(|i| vec![min + ((max - min) * i as f64) / (n - 1) as f64, p1, p2]).collect()
}

/// The checksum layout the original's tests used: per row an i32 step count, then
/// its outputs.
fn checksum(m: ModelName, rows: &[Vec<f64>], end: f64) -> String {
    let run = model::run_table(library(), m, rows, end, 0.01, RESULT_BUDGET, Instant::now() + Duration::from_secs(120))
        .expect("the table runs");
    assert!(!run.timed_out);
    let mut bytes = Vec::new();
    for row in &run.rows {
        bytes.extend_from_slice(&row.status.to_le_bytes());
        for v in &row.outputs {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    hex::encode(Sha256::digest(&bytes))
}

#[test]
fn van_der_pol_100_rows_match_the_published_checksum() {
    let rows = sweep(100, 0.1, 5.0, 2.0, 0.0);
    assert_eq!(
        checksum(ModelName::VanDerPol, &rows, 20.0),
        "d1109d62b94796946a2b5a706d45e6259a005b63ee392fed918f39945c980815"
    );
}

#[test]
fn bouncing_ball_100_rows_match_the_published_checksum() {
    let rows = sweep(100, 0.1, 0.95, 1.0, 0.0);
    assert_eq!(
        checksum(ModelName::BouncingBall, &rows, 3.0),
        "b031e512febeef2aea72b38e52c84e6f5e1bc92396c991c1a2a93218f825a8ec"
    );
}

#[test]
fn lorenz_50_chaotic_rows_match_the_published_checksum() {
    let rows = sweep(50, 20.0, 40.0, 10.0, 8.0 / 3.0);
    assert_eq!(
        checksum(ModelName::Lorenz, &rows, 60.0),
        "70f1e8e657d804e176f18bf7afb01811a4b0b5f41d4609b74184ab2a6ab6a67e"
    );
}

#[test]
fn a_row_past_the_16_mib_instance_cap_fails_alone() {
    let rows = vec![vec![1.0, 7.0, 0.0], vec![16.0, 8.0, 0.0], vec![2.0, 9.0, 0.0]];
    let run = model::run_table(
        library(),
        ModelName::Greedy,
        &rows,
        1.0,
        1.0,
        RESULT_BUDGET,
        Instant::now() + Duration::from_secs(30),
    )
    .expect("runs");
    let got: Vec<(i32, Vec<f64>)> = run.rows.into_iter().map(|r| (r.status, r.outputs)).collect();
    assert_eq!(got, vec![(1, vec![7.0]), (-7, vec![]), (1, vec![9.0])]);
}

#[test]
fn the_worker_refuses_what_it_cannot_run() {
    let deadline = Instant::now() + Duration::from_secs(30);
    let e = model::run_table(library(), ModelName::VanDerPol, &[vec![1.0, 2.0]], 20.0, 0.01, RESULT_BUDGET, deadline)
        .expect_err("narrow row");
    assert_eq!((e.exit, e.message.as_str()), (model::EXIT_PARAMS, "params line 1: expected 3 values, got 2"));
    let rows = sweep(300, 0.1, 5.0, 2.0, 0.0);
    let e = model::run_table(library(), ModelName::VanDerPol, &rows, 20.0, 0.01, RESULT_BUDGET, deadline)
        .expect_err("over the budget");
    assert_eq!(e.exit, model::EXIT_BUDGET);
    assert_eq!(
        e.message,
        "results could reach 9610820 bytes for 300 rows of up to 2002 steps, over the 8388608 byte budget; send \
         fewer rows or a shorter horizon"
    );
}

#[test]
fn a_table_stops_at_its_deadline() {
    let rows = sweep(50, 20.0, 40.0, 10.0, 8.0 / 3.0);
    let run = model::run_table(
        library(),
        ModelName::Lorenz,
        &rows,
        60.0,
        0.01,
        RESULT_BUDGET,
        Instant::now() + Duration::from_millis(30),
    )
    .expect("runs");
    assert!(run.timed_out);
    assert!(run.rows.len() < 50);
}

#[test]
fn the_catalogue_knows_each_models_width() {
    for m in ModelName::ALL {
        let d = library().model(m).expect("model loads").description().clone();
        assert_eq!(d.outputs.len(), m.outputs(), "{m}");
        assert_eq!(d.parameters.len(), 3, "{m}");
    }
}
