//! How long an eval set's labels take to read, by rows: `labels.csv` against the same labels as
//! `labels.jsonl`, at 80,000, 200,000 and 1,000,000 rows (the reader runs before any session, so
//! its time is paid whatever the targets; it must grow linearly with the file, and 200,000 rows
//! must be judged within 10 s).
//!
//! `cargo bench --bench labels_read` writes the files into a temporary directory, reads each
//! three times with `npu_audit::data::dataset::labels::read` (ids put in the set's order, every label
//! matched to its sample), and prints the median per file, its rows per second and the ratio of
//! the largest to the smallest per row (1.0 is linear).

use std::io::Write as _;
use std::time::Instant;

use npu_audit::data::dataset::labels;

const ROWS: [usize; 3] = [80_000, 200_000, 1_000_000];
const RUNS: usize = 3;

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|k| format!("line{k:07}")).collect()
}

/// Writes `n` rows as CSV and as JSON lines; a few labels quoted with a comma, as transcripts are.
fn write(dir: &std::path::Path, n: usize) -> (std::path::PathBuf, std::path::PathBuf) {
    let (csv, jsonl) = (dir.join(format!("labels{n}.csv")), dir.join(format!("labels{n}.jsonl")));
    let mut c = std::io::BufWriter::new(std::fs::File::create(&csv).unwrap());
    let mut j = std::io::BufWriter::new(std::fs::File::create(&jsonl).unwrap());
    writeln!(c, "id,label").unwrap();
    for (k, id) in ids(n).iter().enumerate() {
        let label = if k % 97 == 0 {
            format!("\"word {k}, and more\"")
        } else {
            (k % 10).to_string()
        };
        writeln!(c, "{id},{label}").unwrap();
        let json_label = if k % 97 == 0 {
            format!("\"word {k}, and more\"")
        } else {
            (k % 10).to_string()
        };
        writeln!(j, "{{\"id\": \"{id}\", \"label\": {json_label}}}").unwrap();
    }
    (csv, jsonl)
}

fn median_secs(path: &std::path::Path, ids: &[String]) -> f64 {
    let mut times: Vec<f64> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let read = labels::read(path, ids).expect("labels read");
            assert_eq!(read.len(), ids.len());
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[RUNS / 2]
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    println!("rows        csv median   jsonl median   csv rows/s");
    let mut per_row = Vec::new();
    for n in ROWS {
        let (csv, jsonl) = write(dir.path(), n);
        let ids = ids(n);
        let (c, j) = (median_secs(&csv, &ids), median_secs(&jsonl, &ids));
        println!("{n:>9}   {c:>9.3} s   {j:>10.3} s   {:>10.0}", n as f64 / c);
        per_row.push(c / n as f64);
    }
    println!(
        "csv time per row, {} rows over {} rows: {:.2} (1.00: linear)",
        ROWS[ROWS.len() - 1],
        ROWS[0],
        per_row[per_row.len() - 1] / per_row[0]
    );
}
