//! The records of an eval as it goes: one JSON-lines file per run in the records directory
//! (`reference.jsonl`, `<target>.jsonl`), a line appended per sample (its record and the digest of
//! the inputs it was fed), beside `context.json` (what the records are of). A run killed at any
//! point and started again with the same directory and the same context continues after the last
//! sample every run recorded; a sample is never counted twice, and a damaged last line (a kill
//! mid-write) is dropped. The directory is locked while an eval uses it, and its files are
//! replaced, never written through: a link planted in it cannot redirect a write.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::RunEnd;
use crate::analyses::accuracy::Record;
use crate::data::tensor::Tensor;
use crate::foundation::error::bad_output;
use crate::report::RunStatus;

/// The file that says what a records directory holds.
const CONTEXT_FILE: &str = "context.json";

/// The longest line a records file may hold (a record with a long transcript is a few KiB).
const MAX_LINE_BYTES: u64 = 1 << 20;

/// A records directory in use (locked until dropped).
pub struct Checkpoint {
    dir: PathBuf,
    writers: Vec<BufWriter<File>>,
    _lock: File,
}

/// One line of a run's records file.
#[derive(Serialize, Deserialize)]
struct Line {
    /// [`input_digest`] of the sample the record is of.
    input: String,
    record: Record,
}

/// What identifies a sample's inputs in the records: the SHA-256 of each input's name and `.npy`
/// bytes, so that a resumed eval can tell a sample that changed since it was recorded.
pub fn input_digest(inputs: &[(String, Tensor)]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for (name, t) in inputs {
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        match t.to_npy_bytes() {
            Ok(bytes) => hasher.update(&bytes),
            Err(e) => hasher.update(e.to_string().as_bytes()),
        }
    }
    crate::foundation::hash::hex(&hasher.finalize())
}

/// A run's files' name: its id made a file name, and the first 12 hex digits of the id's SHA-256,
/// so that two ids that read alike as file names (`cpu:a,b` and `cpu,a_b`) never share a file.
pub fn run_file_stem(run: &str) -> String {
    let digest = crate::foundation::hash::sha256_hex(run.as_bytes());
    format!("{}-{}", crate::execution::exec::executor::sanitize(run), &digest[..12])
}

/// The file of a run's records.
fn run_file(dir: &Path, run: &str) -> PathBuf {
    dir.join(format!("{}.jsonl", run_file_stem(run)))
}

/// The file that says a run stopped (and why): it is not run again on resume.
fn stopped_file(dir: &Path, run: &str) -> PathBuf {
    dir.join(format!("{}.stopped.json", run_file_stem(run)))
}

/// The file that says a sequential eval's target was decided at its last record: its records are
/// not cut to the other runs' on resume (the stream checks that they do decide there).
fn decided_file(dir: &Path, run: &str) -> PathBuf {
    dir.join(format!("{}.decided.json", run_file_stem(run)))
}

/// The first line of a run's records file: whose records it holds, checked on every read.
#[derive(Serialize, Deserialize)]
struct Header {
    run: String,
}

/// Whether the records directory holds `path` as a regular file (`false`: nothing there). A link,
/// directory, device or FIFO in its place is refused: the directory is not an eval's records.
fn holds_file(path: &Path) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => Ok(true),
        Ok(m) => Err(bad_output(format!(
            "--records: {} is {}, not a record file; give a new or empty directory",
            path.display(),
            crate::foundation::userfile::kind_of(&m)
        ))),
        Err(_) => Ok(false),
    }
}

/// Replaces `path` with a new file (an existing file, or a link, is removed first and never
/// written through).
fn create_fresh(path: &Path) -> Result<File> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(bad_output(format!("--records: cannot replace {}: {e}", path.display())))
        }
        _ => {}
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| bad_output(format!("--records: cannot write {}: {e}", path.display())))
}

/// The JSON of a small file of the directory (`context.json`, a stop marker), read up to
/// [`MAX_LINE_BYTES`]; `None` when it cannot be read or is not JSON.
fn read_small_json(path: &Path) -> Option<serde_json::Value> {
    let bytes = crate::foundation::userfile::read_capped(path, MAX_LINE_BYTES).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// How a run stopped, as its marker says.
fn read_stopped(path: &Path) -> Option<RunEnd> {
    let v = read_small_json(path)?;
    Some(RunEnd {
        status: serde_json::from_value(v.get("status")?.clone()).ok()?,
        error: v.get("error").and_then(|e| e.as_str()).map(str::to_string),
    })
}

/// What a records directory held for the runs of an eval: each run's records with the digests of
/// their inputs (every run that still answers cut to the shortest of them), and the runs that had
/// stopped.
pub struct Resumed {
    pub records: Vec<Vec<Record>>,
    pub inputs: Vec<Vec<String>>,
    pub stopped: Vec<Option<RunEnd>>,
    /// Runs a sequential eval decided (at their last record, if the records are the tool's).
    pub decided: Vec<bool>,
}

/// Reads run `run`'s records in order (the first of sample `start`), up to the first damaged
/// line; refuses a file whose header names another run (or none).
fn read_records(path: &Path, run: &str, start: usize) -> Result<(Vec<Record>, Vec<String>)> {
    let (mut records, mut inputs) = (Vec::new(), Vec::new());
    let Ok(file) = File::open(path) else {
        return Ok((records, inputs));
    };
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    let _ = (&mut reader).take(MAX_LINE_BYTES).read_line(&mut line);
    match serde_json::from_str::<Header>(&line) {
        Ok(h) if h.run == run => {}
        // A file cut before its header was finished holds nothing yet.
        _ if !line.ends_with('\n') => return Ok((records, inputs)),
        _ => {
            return Err(bad_output(format!(
                "--records: {} is not {}'s records (its first line does not name it); give a new or empty directory",
                path.display(),
                crate::foundation::console::printable(run)
            )))
        }
    }
    loop {
        line.clear();
        match (&mut reader).take(MAX_LINE_BYTES).read_line(&mut line) {
            Ok(n) if n > 0 && line.ends_with('\n') => {}
            _ => break,
        }
        match serde_json::from_str::<Line>(&line) {
            Ok(l) if l.record.index == start + records.len() => {
                records.push(l.record);
                inputs.push(l.input);
            }
            _ => break,
        }
    }
    Ok((records, inputs))
}

/// Takes the directory's lock: two evals never write one records directory.
fn lock(dir: &Path) -> Result<File> {
    let shown = dir.display();
    let file = File::open(dir).map_err(|e| bad_output(format!("--records {shown}: {e}")))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(bad_output(format!(
            "--records {shown} is in use by another eval; wait for it, or give another directory"
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(bad_output(format!("--records {shown}: cannot lock it: {e}"))),
    }
}

impl Checkpoint {
    /// Opens `dir` for the runs `runs` of an eval described by `context` (JSON). A new or empty
    /// directory starts from nothing; one holding the records of the same context resumes: every
    /// run's records up to the shortest are returned (the rest is recorded again). A directory
    /// holding anything else is refused.
    /// The records are of the `samples` samples from `start` on (a shard's window). `decidable` says, per run,
    /// whether a sequential eval decides it: only such a run's marker that it was decided is
    /// honoured (any other run's records are cut to the others').
    pub fn open(
        dir: &Path,
        context: &serde_json::Value,
        (runs, decidable): (&[String], &[bool]),
        (start, samples): (usize, usize),
    ) -> Result<(Checkpoint, Resumed)> {
        let shown = dir.display();
        crate::foundation::userfile::check_dir_destination("--records", dir)?;
        std::fs::create_dir_all(dir).map_err(|e| bad_output(format!("--records {shown}: {e}")))?;
        let lock = lock(dir)?;
        let context_path = dir.join(CONTEXT_FILE);
        let occupied = std::fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(false);
        let resumed = if occupied {
            resume(dir, &context_path, context, (runs, decidable), (start, samples))?
        } else {
            Resumed {
                records: vec![Vec::new(); runs.len()],
                inputs: vec![Vec::new(); runs.len()],
                stopped: vec![None; runs.len()],
                decided: vec![false; runs.len()],
            }
        };
        create_fresh(&context_path)?
            .write_all(&serde_json::to_vec_pretty(context)?)
            .map_err(|e| bad_output(format!("--records {shown}: {e}")))?;
        let mut writers = Vec::with_capacity(runs.len());
        for (k, run) in runs.iter().enumerate() {
            let mut w = BufWriter::new(create_fresh(&run_file(dir, run))?);
            serde_json::to_writer(&mut w, &Header { run: run.clone() })?;
            w.write_all(b"\n")?;
            for (record, input) in resumed.records[k].iter().zip(&resumed.inputs[k]) {
                write_line(&mut w, input, record)?;
            }
            w.flush()?;
            writers.push(w);
        }
        let checkpoint = Checkpoint {
            dir: dir.to_path_buf(),
            writers,
            _lock: lock,
        };
        Ok((checkpoint, resumed))
    }

    /// Records that run `run` stopped answering, and why: a resumed eval does not run it again.
    pub fn stop(&self, run: &str, end: &RunEnd) -> Result<()> {
        let status: RunStatus = end.status;
        let marker = serde_json::json!({"status": status, "error": end.error});
        create_fresh(&stopped_file(&self.dir, run))?
            .write_all(&serde_json::to_vec_pretty(&marker)?)
            .with_context(|| format!("cannot write the records in {}", self.dir.display()))
    }

    /// Records that run `run` (a sequential eval's target) was decided at its last record.
    pub fn decided(&self, run: &str) -> Result<()> {
        create_fresh(&decided_file(&self.dir, run))?
            .write_all(b"{\"decided\": true}\n")
            .with_context(|| format!("cannot write the records in {}", self.dir.display()))
    }

    /// Appends one sample's records (one per run, in the order the runs were opened; `None` for a
    /// run that no longer answers), with the digest of its inputs, and flushes them.
    pub fn append(&mut self, input: &str, records: &[Option<&Record>]) -> Result<()> {
        for (w, r) in self.writers.iter_mut().zip(records) {
            if let Some(r) = r {
                write_line(w, input, r)?;
                w.flush()
                    .with_context(|| format!("cannot write the records in {}", self.dir.display()))?;
            }
        }
        Ok(())
    }
}

fn write_line(w: &mut BufWriter<File>, input: &str, record: &Record) -> Result<()> {
    serde_json::to_writer(&mut *w, &LineRef { input, record })?;
    w.write_all(b"\n")?;
    Ok(())
}

/// [`Line`], borrowed for writing.
#[derive(Serialize)]
struct LineRef<'a> {
    input: &'a str,
    record: &'a Record,
}

/// Reads what an occupied records directory holds for `runs`, if it holds the records of
/// Whether two contexts differ in the host's kernel class only.
fn other_host(found: &serde_json::Value, context: &serde_json::Value) -> bool {
    let without = |v: &serde_json::Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("host");
        }
        v
    };
    found.get("host") != context.get("host") && without(found) == without(context)
}

/// What two records contexts differ in, in words: the keys that differ, each named as the user
/// knows it.
fn what_differs(found: &serde_json::Value, context: &serde_json::Value) -> String {
    let words = |key: &str| match key {
        "tool" => "npu-audit release",
        "model" => "model",
        "reference" => "reference",
        "dataset" | "ids" => "set",
        "labels" => "labels file",
        "task" => "task",
        "runs" => "list of targets",
        "runtimes" => "runtimes",
        "threads" => "thread count",
        "window" => "part of the set",
        "order_seed" => "sample order (--until-decided, --order-seed)",
        "limits" => "limits the sequential eval decides",
        _ => "setting",
    };
    let keys = |v: &serde_json::Value| {
        v.as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let mut all = keys(found);
    all.extend(keys(context));
    let mut differing: Vec<&str> = all
        .iter()
        .filter(|k| found.get(k.as_str()) != context.get(k.as_str()))
        .map(|k| words(k))
        .collect();
    let mut seen = Vec::new();
    differing.retain(|w| {
        let new = !seen.contains(w);
        seen.push(*w);
        new
    });
    if differing.is_empty() {
        "eval".into()
    } else {
        differing.join(", ")
    }
}

/// Refuses a records directory whose `context.json` is not `context`: another host class, another
/// eval (saying what differs), or no context at all.
fn same_eval(dir: &Path, context_path: &Path, context: &serde_json::Value) -> Result<()> {
    let shown = dir.display();
    let found = if holds_file(context_path)? {
        read_small_json(context_path)
    } else {
        None
    };
    match found {
        Some(c) if &c == context => Ok(()),
        Some(c) if other_host(&c, context) => Err(bad_output(format!(
            "--records {shown} holds the records of this eval made on a host of class {} (this host is {}): the CPU EP and OpenVINO may compute other figures there, so one report would join two machines' figures; resume on a host of that class, or give a new or empty directory",
            c["host"].as_str().unwrap_or("unrecorded"),
            context["host"].as_str().unwrap_or("unrecorded")
        ))),
        Some(c) => Err(bad_output(format!(
            "--records {shown} holds the records of another eval (another {}); give a new or empty directory",
            what_differs(&c, context)
        ))),
        None => Err(bad_output(format!(
            "--records {shown} holds files that are not an eval's records; give a new or empty directory"
        ))),
    }
}

/// `context`; refuses another eval's records or a stranger's directory.
fn resume(
    dir: &Path,
    context_path: &Path,
    context: &serde_json::Value,
    (runs, decidable): (&[String], &[bool]),
    (start, samples): (usize, usize),
) -> Result<Resumed> {
    let shown = dir.display();
    same_eval(dir, context_path, context)?;
    let mut records = Vec::with_capacity(runs.len());
    let mut inputs = Vec::with_capacity(runs.len());
    let mut stopped = Vec::with_capacity(runs.len());
    let mut decided = Vec::with_capacity(runs.len());
    for (k, run) in runs.iter().enumerate() {
        let (file, marker) = (run_file(dir, run), stopped_file(dir, run));
        let (r, i) = if holds_file(&file)? {
            read_records(&file, run, start)?
        } else {
            Default::default()
        };
        records.push(r);
        inputs.push(i);
        // Only a target stops and resumes as stopped (the reference stopping ends the eval), and
        // a stopped run did not end well: any other marker is not the tool's and is ignored.
        let end = match holds_file(&marker)? {
            true if run != "reference" => read_stopped(&marker).filter(|e| e.status != RunStatus::Ok),
            _ => None,
        };
        stopped.push(end);
        let may_decide = decidable.get(k).copied().unwrap_or(false);
        decided.push(may_decide && holds_file(&decided_file(dir, run))?);
    }
    // More records than samples is no eval's, whether the run stopped or not (before the runs
    // are cut to the shortest, which would hide it).
    if let Some((run, r)) = runs.iter().zip(&records).find(|(_, r)| r.len() > samples) {
        return Err(bad_output(format!(
            "--records {shown}: {} holds {} records for a set of {samples} samples; give a new or empty directory",
            crate::foundation::console::printable(run),
            r.len()
        )));
    }
    let answering = |k: usize| stopped[k].is_none() && !decided[k];
    let shortest = (0..runs.len())
        .filter(|&k| answering(k))
        .map(|k| records[k].len())
        .min()
        .unwrap_or(0);
    for k in (0..runs.len()).filter(|&k| answering(k)) {
        records[k].truncate(shortest);
        inputs[k].truncate(shortest);
    }
    Ok(Resumed {
        records,
        inputs,
        stopped,
        decided,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyses::accuracy::task::{Judged, Prediction, Truth};

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
        let (mut c, kept) = Checkpoint::open(&records, &context, (&runs, &[]), (0, 10)).unwrap();
        assert!(kept.records.iter().all(Vec::is_empty));
        for k in 0..3 {
            let (a, b) = (record(k), record(k));
            c.append("digest", &[Some(&a), (k < 2).then_some(&b)]).unwrap();
        }
        drop(c);
        // A kill in the middle of a line.
        let cpu = run_file(&records, "cpu");
        let mut text = std::fs::read_to_string(&cpu).unwrap();
        text.push_str("{\"input\": \"digest\", \"record\": {\"index\": 2");
        std::fs::write(&cpu, text).unwrap();
        let (c, kept) = Checkpoint::open(&records, &context, (&runs, &[]), (0, 10)).unwrap();
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
        // Another eval is refused the directory while this one holds it.
        let busy = Checkpoint::open(&records, &context, (&runs, &[]), (0, 10))
            .err()
            .unwrap()
            .to_string();
        assert!(busy.contains("in use by another eval"), "{busy}");
        drop(c);
        let (c, kept) = Checkpoint::open(&records, &context, (&runs, &[]), (0, 10)).unwrap();
        assert_eq!(kept.stopped[1].as_ref().map(|e| e.status), Some(RunStatus::Crashed));
        assert_eq!(kept.inputs[0], vec!["digest".to_string(); 2]);
        drop(c);
        // Another eval's records, or a stranger's directory, are refused.
        assert!(Checkpoint::open(&records, &serde_json::json!({"model": "x"}), (&runs, &[]), (0, 10)).is_err());
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("notes.txt"), "mine").unwrap();
        assert!(Checkpoint::open(&other, &context, (&runs, &[]), (0, 10)).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn a_link_planted_among_the_records_is_refused_and_its_target_kept() {
        let dir = tempfile::tempdir().unwrap();
        let records = dir.path().join("records");
        let context = serde_json::json!({"model": "abc"});
        let runs = vec!["reference".to_string()];
        let (mut c, _) = Checkpoint::open(&records, &context, (&runs, &[]), (0, 10)).unwrap();
        c.append("digest", &[Some(&record(0))]).unwrap();
        drop(c);
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        let file = run_file(&records, "reference");
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&victim, &file).unwrap();
        let refused = Checkpoint::open(&records, &context, (&runs, &[]), (0, 10))
            .err()
            .unwrap()
            .to_string();
        assert!(refused.contains("a symbolic link"), "{refused}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }
}
