//! The records of an eval as it goes: one JSON-lines file per run in the records directory
//! (`reference.jsonl`, `<target>.jsonl`), a line appended per sample, beside `context.json` (what
//! the records are of). A run killed at any point and started again with the same directory and
//! the same context continues after the last sample every run recorded; a sample is never counted
//! twice, and a damaged last line (a kill mid-write) is dropped.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::RunEnd;
use crate::error::bad_output;
use crate::eval::Record;
use crate::exec::RunStatus;

/// The file that says what a records directory holds.
const CONTEXT_FILE: &str = "context.json";

/// A records directory in use.
pub struct Checkpoint {
    dir: PathBuf,
    writers: Vec<BufWriter<File>>,
}

/// The file of a run's records.
fn run_file(dir: &Path, run: &str) -> PathBuf {
    dir.join(format!("{}.jsonl", crate::exec::executor::sanitize(run)))
}

/// The file that says a run stopped (and why): it is not run again on resume.
fn stopped_file(dir: &Path, run: &str) -> PathBuf {
    dir.join(format!("{}.stopped.json", crate::exec::executor::sanitize(run)))
}

/// How a run stopped, as its marker says.
fn read_stopped(path: &Path) -> Option<RunEnd> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    Some(RunEnd {
        status: serde_json::from_value(v.get("status")?.clone()).ok()?,
        error: v.get("error").and_then(|e| e.as_str()).map(str::to_string),
    })
}

/// What a records directory held for the runs of an eval: each run's records (every run that
/// still answers cut to the shortest of them) and the runs that had stopped.
pub struct Resumed {
    pub records: Vec<Vec<Record>>,
    pub stopped: Vec<Option<RunEnd>>,
}

/// Reads a run's records in order, up to the first damaged line.
fn read_records(path: &Path) -> Vec<Record> {
    let Ok(file) = File::open(path) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Record>(&line) {
            Ok(r) if r.index == out.len() => out.push(r),
            _ => break,
        }
    }
    out
}

impl Checkpoint {
    /// Opens `dir` for the runs `runs` of an eval described by `context` (JSON). A new or empty
    /// directory starts from nothing; one holding the records of the same context resumes: every
    /// run's records up to the shortest are returned (the rest is recorded again). A directory
    /// holding anything else is refused.
    pub fn open(dir: &Path, context: &serde_json::Value, runs: &[String]) -> Result<(Checkpoint, Resumed)> {
        let shown = dir.display();
        crate::userfile::check_dir_destination("--records", dir)?;
        std::fs::create_dir_all(dir).map_err(|e| bad_output(format!("--records {shown}: {e}")))?;
        let context_path = dir.join(CONTEXT_FILE);
        let occupied = std::fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(false);
        let mut kept: Vec<Vec<Record>> = vec![Vec::new(); runs.len()];
        let mut stopped: Vec<Option<RunEnd>> = vec![None; runs.len()];
        if occupied {
            let found: Option<serde_json::Value> = std::fs::read(&context_path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            match found {
                Some(c) if &c == context => {
                    kept = runs.iter().map(|r| read_records(&run_file(dir, r))).collect();
                    stopped = runs.iter().map(|r| read_stopped(&stopped_file(dir, r))).collect();
                    let answering = || kept.iter().zip(&stopped).filter(|(_, s)| s.is_none());
                    let shortest = answering().map(|(k, _)| k.len()).min().unwrap_or(0);
                    for (k, s) in kept.iter_mut().zip(&stopped) {
                        if s.is_none() {
                            k.truncate(shortest);
                        }
                    }
                }
                Some(_) => {
                    return Err(bad_output(format!(
                        "--records {shown} holds the records of another eval (another model, set, task, targets or runtimes); give a new or empty directory"
                    )))
                }
                None => {
                    return Err(bad_output(format!(
                        "--records {shown} holds files that are not an eval's records; give a new or empty directory"
                    )))
                }
            }
        }
        std::fs::write(&context_path, serde_json::to_vec_pretty(context)?)
            .map_err(|e| bad_output(format!("--records {shown}: {e}")))?;
        let mut writers = Vec::with_capacity(runs.len());
        for (run, records) in runs.iter().zip(&kept) {
            let path = run_file(dir, run);
            let mut w =
                BufWriter::new(File::create(&path).with_context(|| format!("cannot write {}", path.display()))?);
            for r in records {
                serde_json::to_writer(&mut w, r)?;
                w.write_all(b"\n")?;
            }
            w.flush()?;
            writers.push(w);
        }
        Ok((
            Checkpoint {
                dir: dir.to_path_buf(),
                writers,
            },
            Resumed { records: kept, stopped },
        ))
    }

    /// Records that run `run` stopped answering, and why: a resumed eval does not run it again.
    pub fn stop(&self, run: &str, end: &RunEnd) -> Result<()> {
        let status: RunStatus = end.status;
        let marker = serde_json::json!({"status": status, "error": end.error});
        std::fs::write(stopped_file(&self.dir, run), serde_json::to_vec_pretty(&marker)?)
            .with_context(|| format!("cannot write the records in {}", self.dir.display()))
    }

    /// Appends one sample's records (one per run, in the order the runs were opened; `None` for a
    /// run that no longer answers) and flushes them.
    pub fn append(&mut self, records: &[Option<&Record>]) -> Result<()> {
        for (w, r) in self.writers.iter_mut().zip(records) {
            if let Some(r) = r {
                serde_json::to_writer(&mut *w, r)?;
                w.write_all(b"\n")?;
                w.flush()
                    .with_context(|| format!("cannot write the records in {}", self.dir.display()))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::task::{Judged, Prediction, Truth};

    fn record(index: usize) -> Record {
        Record {
            index,
            id: format!("s{index}"),
            prediction: Some(Prediction::Classes(vec![1])),
            truth: Truth::Class(1),
            judged: Judged {
                correct: true,
                in_top_k: None,
                reading: None,
            },
            sqnr_db: None,
            error: None,
        }
    }

    #[test]
    fn a_killed_run_resumes_after_what_every_run_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let records = dir.path().join("records");
        let context = serde_json::json!({"model": "abc"});
        let runs = vec!["reference".to_string(), "cpu".to_string()];
        let (mut c, kept) = Checkpoint::open(&records, &context, &runs).unwrap();
        assert!(kept.records.iter().all(Vec::is_empty));
        for k in 0..3 {
            let (a, b) = (record(k), record(k));
            c.append(&[Some(&a), (k < 2).then_some(&b)]).unwrap();
        }
        drop(c);
        // A kill in the middle of a line.
        let cpu = run_file(&records, "cpu");
        let mut text = std::fs::read_to_string(&cpu).unwrap();
        text.push_str("{\"index\": 2, \"id\"");
        std::fs::write(&cpu, text).unwrap();
        let (c, kept) = Checkpoint::open(&records, &context, &runs).unwrap();
        assert_eq!(kept.records.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 2]);
        // A run that stopped keeps what it recorded and is not cut to the others.
        c.stop(
            "cpu",
            &RunEnd {
                status: RunStatus::Crashed,
                error: Some("signal 11".into()),
            },
        )
        .unwrap();
        let (_, kept) = Checkpoint::open(&records, &context, &runs).unwrap();
        assert_eq!(kept.stopped[1].as_ref().map(|e| e.status), Some(RunStatus::Crashed));
        // Another eval's records, or a stranger's directory, are refused.
        assert!(Checkpoint::open(&records, &serde_json::json!({"model": "x"}), &runs).is_err());
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("notes.txt"), "mine").unwrap();
        assert!(Checkpoint::open(&other, &context, &runs).is_err());
    }
}
