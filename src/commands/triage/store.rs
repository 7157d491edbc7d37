//! The triage store: a SQLite file that makes triage incremental. A report already triaged under
//! the same context (model, reference, runtimes, thresholds, candidates, tool version) is read back
//! instead of triaged again, keyed by its content hash, so a rerun over a growing fleet triages
//! only the new reports; every local run is kept per (target, inputs hash), so simulation work
//! grows with the distinct input sets, not with the reports. `triage --summary` reads it back.
//!
//! The file is the tool's own: it is recognised by SQLite's `application_id` and refused when it
//! is anything else, so a database that happens to sit where the store would go is never touched;
//! the default store (inside a fleet strangers fill) is never used through a symbolic link.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use sha2::{Digest, Sha256};

use super::{CandidateRun, ReportEntry, Thresholds, TriageOptions};
use crate::data::tensor::{npz_bytes, read_npz_bytes, Tensor};
use crate::foundation::error::{bad_output, run_error};

/// SQLite `application_id` of a triage store ("NPUA").
const APPLICATION_ID: i32 = 0x4E50_5541;
/// Layout version (`PRAGMA user_version`); a store of another version is refused.
const STORE_VERSION: i32 = 1;
/// The store's file name when `--db` is not given.
pub const DEFAULT_FILE_NAME: &str = "triage.db";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS contexts(
    context TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    model_sha256 TEXT NOT NULL,
    reference TEXT NOT NULL,
    thresholds TEXT NOT NULL,
    candidates TEXT NOT NULL,
    intra_op_threads INTEGER NOT NULL,
    tool_version TEXT NOT NULL,
    last_used INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS reproductions(
    context TEXT NOT NULL,
    target TEXT NOT NULL,
    inputs TEXT NOT NULL,
    run TEXT NOT NULL,
    names TEXT NOT NULL,
    outputs BLOB NOT NULL,
    PRIMARY KEY(context, target, inputs));
CREATE TABLE IF NOT EXISTS reports(
    context TEXT NOT NULL,
    content_sha256 TEXT NOT NULL,
    path TEXT NOT NULL,
    chipset TEXT,
    verdict TEXT NOT NULL,
    sqnr_db REAL,
    entry TEXT NOT NULL,
    triaged INTEGER NOT NULL,
    PRIMARY KEY(context, content_sha256));
";

/// An open triage store.
pub struct Store {
    conn: Connection,
    /// Where the file is, for messages and the triage's `store.path`.
    pub path: PathBuf,
    /// Whether SQLite could open it only for reading (the file's or its directory's mode).
    readonly: bool,
}

/// One run of one target on one input set, as kept in the store.
pub struct StoredRun {
    /// Its record as the triage JSON lists it.
    pub run: CandidateRun,
    /// Its outputs per sample, by output name.
    pub samples: Vec<Vec<(String, Tensor)>>,
}

/// What a triage context was, as `--summary` shows it.
#[derive(Debug, Clone)]
pub struct StoredContext {
    /// The entry context's hash (see [`entry_context`]).
    pub context: String,
    /// The model's path when it was last triaged.
    pub model: String,
    pub model_sha256: String,
    pub reference: String,
    pub thresholds: Thresholds,
    pub intra_op_threads: usize,
    pub tool_version: String,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// What every refusal of the store ends with: the way out.
const WAY_OUT: &str = "name another with --db, or use --no-db";

/// A store that cannot be used as one (exit code 2): the file is left as it is. `e` is a sentence
/// about the store ("is read-only here") or what was found ("no such store").
fn refuse(path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    let e = e.to_string();
    let sep = if e.starts_with("is ") { " " } else { ": " };
    bad_output(format!("triage store {}{sep}{e} ({WAY_OUT})", path.display()))
}

/// An SQLite error while the store is opened or used, said for what it means: another process
/// holding the store locked past the wait is the machine's state (exit 4); a damaged file, one
/// that is no database, or one that may not be written is the store the user named (exit 2).
fn sql_error(path: &Path, e: rusqlite::Error) -> anyhow::Error {
    use rusqlite::ffi::ErrorCode;
    let shown = path.display();
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => run_error(format!(
            "triage store {shown} is locked by another process (waited {} s; {WAY_OUT})",
            BUSY_WAIT.as_secs()
        )),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
            refuse(path, format!("is damaged or not an SQLite database ({e})"))
        }
        Some(ErrorCode::ReadOnly) => refuse(path, "is read-only here"),
        Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => refuse(path, format!("cannot be opened: {e}")),
        Some(ErrorCode::DiskFull) => crate::foundation::error::OutputError::NoSpace(format!(
            "triage store {shown}: the disk is full ({WAY_OUT})"
        ))
        .into(),
        _ => run_error(format!("triage store {shown}: {e} ({WAY_OUT})")),
    }
}

/// How long an operation waits for another process's lock on the store.
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Where a store may be opened: a regular file or nothing yet. A link is refused at the default
/// location (a stranger can plant one in a fleet directory) and, anywhere, when it points nowhere
/// (the store would be created wherever it points); a `--db` link to an existing file is followed.
fn check_location(path: &Path, at_default: bool) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if meta.file_type().is_symlink() {
        if at_default {
            return Err(refuse(
                path,
                "is a symbolic link, and the default store is never used through one",
            ));
        }
        if std::fs::metadata(path).is_err() {
            return Err(refuse(
                path,
                "is a symbolic link to a missing file, and no store is created through a link",
            ));
        }
    }
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(refuse(
            path,
            format!(
                "is {}, not a triage store file",
                crate::foundation::userfile::kind_of(&m)
            ),
        )),
        _ => Ok(()),
    }
}

impl Store {
    /// Opens the store at `path`, creating it when `create` and it does not exist; refuses a file
    /// that is not a triage store of this version, and a link where one must not be
    /// (`at_default`: the user's store, used when `--db` is not given). A store
    /// that may only be read is opened read-only, for what needs no writing.
    pub fn open(path: &Path, create: bool, at_default: bool) -> Result<Store> {
        check_location(path, at_default)?;
        let exists = path.exists();
        if !exists && !create {
            return Err(refuse(path, "no such store (triage writes one)"));
        }
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        if at_default {
            flags |= OpenFlags::SQLITE_OPEN_NOFOLLOW;
        }
        let conn = Connection::open_with_flags(path, flags).map_err(|e| sql_error(path, e))?;
        conn.busy_timeout(BUSY_WAIT).map_err(|e| sql_error(path, e))?;
        let readonly = conn.is_readonly(rusqlite::MAIN_DB).map_err(|e| sql_error(path, e))?;
        let store = Store {
            conn,
            path: path.to_path_buf(),
            readonly,
        };
        store.check_or_init(exists)?;
        Ok(store)
    }

    fn pragma(&self, name: &str) -> Result<i32> {
        self.conn
            .pragma_query_value(None, name, |r| r.get(0))
            .map_err(|e| sql_error(&self.path, e))
    }

    fn check_or_init(&self, existed: bool) -> Result<()> {
        let (app, version) = (self.pragma("application_id")?, self.pragma("user_version")?);
        let empty = self
            .conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0))
            .map_err(|e| sql_error(&self.path, e))?
            == 0;
        if existed && !empty && app != APPLICATION_ID {
            return Err(refuse(
                &self.path,
                "an SQLite database that is not a triage store; left untouched",
            ));
        }
        if existed && !empty && version != STORE_VERSION {
            return Err(refuse(
                &self.path,
                format!("layout version {version}, this tool reads {STORE_VERSION}"),
            ));
        }
        if self.readonly && !empty {
            // A complete store of this version: read as it is.
            return Ok(());
        }
        self.writable()?;
        self.conn
            .execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {STORE_VERSION}; {SCHEMA}"
            ))
            .map_err(|e| sql_error(&self.path, e))
    }

    /// Fails, saying so, when the store may only be read: checked before any work whose results
    /// it would have to keep.
    pub fn writable(&self) -> Result<()> {
        if self.readonly {
            return Err(refuse(
                &self.path,
                "is read-only here, and this triage has new reports or runs to keep",
            ));
        }
        Ok(())
    }

    /// Records (or touches) a context so `--summary` can say what it was.
    pub fn record_context(
        &self,
        context: &str,
        opts: &TriageOptions,
        model_sha256: &str,
        reference: &str,
    ) -> Result<()> {
        if self.readonly {
            // Only `--summary`'s order depends on it; a read-only store is read as it is.
            return Ok(());
        }
        let threads = opts
            .exec
            .threads
            .unwrap_or(crate::execution::exec::executor::DEFAULT_INTRA_OP_THREADS);
        self.conn
            .execute(
                "INSERT INTO contexts VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT(context) DO UPDATE SET last_used = excluded.last_used, model = excluded.model",
                params![
                    context,
                    opts.audited.model.display().to_string(),
                    model_sha256,
                    reference,
                    serde_json::to_string(&opts.thresholds)?,
                    serde_json::to_string(&candidate_texts(opts))?,
                    i64::try_from(threads).unwrap_or(i64::MAX),
                    env!("CARGO_PKG_VERSION"),
                    now(),
                ],
            )
            .map_err(|e| sql_error(&self.path, e))?;
        Ok(())
    }

    /// The kept run of `target` on `inputs`, if any.
    pub fn reproduction(&self, context: &str, target: &str, inputs: &str) -> Result<Option<StoredRun>> {
        let row: Option<(String, String, Vec<u8>)> = self
            .conn
            .query_row(
                "SELECT run, names, outputs FROM reproductions WHERE context = ?1 AND target = ?2 AND inputs = ?3",
                params![context, target, inputs],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(|e| sql_error(&self.path, e))?;
        let Some((run, names, outputs)) = row else {
            return Ok(None);
        };
        let decoded = (|| -> Result<StoredRun> {
            let run: CandidateRun = serde_json::from_str(&run)?;
            let names: Vec<Vec<String>> = serde_json::from_str(&names)?;
            Ok(StoredRun {
                run,
                samples: decode_samples(&names, outputs)?,
            })
        })();
        // A damaged row is a cache miss: the run is made again and the row replaced.
        Ok(decoded.ok())
    }

    /// Keeps a successful run of `target` on `inputs`.
    pub fn put_reproduction(&self, context: &str, run: &CandidateRun, samples: &[Vec<(String, Tensor)>]) -> Result<()> {
        self.writable()?;
        let names: Vec<Vec<String>> = samples
            .iter()
            .map(|s| s.iter().map(|(n, _)| n.clone()).collect())
            .collect();
        self.conn
            .execute(
                "INSERT OR REPLACE INTO reproductions VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    context,
                    run.target,
                    run.inputs,
                    serde_json::to_string(run)?,
                    serde_json::to_string(&names)?,
                    encode_samples(samples)?,
                ],
            )
            .map_err(|e| sql_error(&self.path, e))?;
        Ok(())
    }

    /// The entry of the report with this content under this context, if triaged before.
    pub fn entry(&self, context: &str, content_sha256: &str) -> Result<Option<ReportEntry>> {
        let text: Option<String> = self
            .conn
            .query_row(
                "SELECT entry FROM reports WHERE context = ?1 AND content_sha256 = ?2",
                params![context, content_sha256],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| sql_error(&self.path, e))?;
        // A damaged row is a cache miss: the report is triaged again and the row replaced.
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// Keeps the entries of reports that were triaged (read, reproduced, decided) in one
    /// transaction.
    pub fn put_entries(&mut self, context: &str, entries: &[&ReportEntry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        self.writable()?;
        let tx = self.conn.transaction().map_err(|e| sql_error(&self.path, e))?;
        for e in entries {
            let Some(hash) = &e.content_sha256 else { continue };
            tx.execute(
                "INSERT OR REPLACE INTO reports VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    context,
                    hash,
                    e.path,
                    e.identity.as_ref().and_then(|i| i.chipset.clone()),
                    serde_json::to_value(e.verdict.kind)?.as_str().unwrap_or_default(),
                    e.sqnr_db.map(|n| n.0).filter(|v| v.is_finite()),
                    serde_json::to_string(e)?,
                    now(),
                ],
            )
            .map_err(|er| sql_error(&self.path, er))?;
        }
        tx.commit().map_err(|e| sql_error(&self.path, e))
    }

    /// Every context, most recently used first.
    pub fn contexts(&self) -> Result<Vec<StoredContext>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT context, model, model_sha256, reference, thresholds, intra_op_threads, tool_version
                 FROM contexts ORDER BY last_used DESC, context",
            )
            .map_err(|e| sql_error(&self.path, e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, String>(6)?,
                ))
            })
            .map_err(|e| sql_error(&self.path, e))?;
        let mut out = Vec::new();
        for row in rows {
            let (context, model, model_sha256, reference, thresholds, threads, tool_version) =
                row.map_err(|e| sql_error(&self.path, e))?;
            out.push(StoredContext {
                context,
                model,
                model_sha256,
                reference,
                thresholds: serde_json::from_str(&thresholds)
                    .map_err(|e| refuse(&self.path, format!("is damaged (thresholds: {e})")))?,
                intra_op_threads: usize::try_from(threads).unwrap_or(0),
                tool_version,
            });
        }
        Ok(out)
    }

    /// Every report entry of a context, by path.
    pub fn entries(&self, context: &str) -> Result<Vec<ReportEntry>> {
        let mut stmt = self
            .conn
            .prepare("SELECT entry FROM reports WHERE context = ?1 ORDER BY path, content_sha256")
            .map_err(|e| sql_error(&self.path, e))?;
        let rows = stmt
            .query_map([context], |r| r.get::<_, String>(0))
            .map_err(|e| sql_error(&self.path, e))?;
        let mut out = Vec::new();
        for row in rows {
            let text = row.map_err(|e| sql_error(&self.path, e))?;
            // A damaged row is left out (the next triage of that report replaces it).
            out.extend(serde_json::from_str::<ReportEntry>(&text).ok());
        }
        Ok(out)
    }

    /// The records (not the outputs) of every run kept on these input sets.
    pub fn runs_of_inputs(&self, context: &str, inputs: &[String]) -> Result<Vec<CandidateRun>> {
        let mut stmt = self
            .conn
            .prepare("SELECT run FROM reproductions WHERE context = ?1 AND inputs = ?2 AND target != 'golden'")
            .map_err(|e| sql_error(&self.path, e))?;
        let mut out = Vec::new();
        for key in inputs {
            let rows = stmt
                .query_map(params![context, key], |r| r.get::<_, String>(0))
                .map_err(|e| sql_error(&self.path, e))?;
            for row in rows {
                let text = row.map_err(|e| sql_error(&self.path, e))?;
                // A damaged row is left out (the next run on these inputs replaces it).
                out.extend(serde_json::from_str::<CandidateRun>(&text).ok());
            }
        }
        Ok(out)
    }

    /// How many runs the store keeps for a context.
    pub fn reproduction_count(&self, context: &str) -> Result<usize> {
        self.conn
            .query_row(
                "SELECT count(*) FROM reproductions WHERE context = ?1",
                [context],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| usize::try_from(n).unwrap_or(0))
            .map_err(|e| sql_error(&self.path, e))
    }
}

/// Samples of named outputs as one `.npz` whose members are `<sample>.<index>` (output names
/// are kept beside it: they may hold `/`, which is no member name).
fn encode_samples(samples: &[Vec<(String, Tensor)>]) -> Result<Vec<u8>> {
    let members: Vec<(String, &Tensor)> = samples
        .iter()
        .enumerate()
        .flat_map(|(s, sample)| {
            sample
                .iter()
                .enumerate()
                .map(move |(k, (_, t))| (format!("{s}.{k}"), t))
        })
        .collect();
    npz_bytes(&members)
}

fn decode_samples(names: &[Vec<String>], bytes: Vec<u8>) -> Result<Vec<Vec<(String, Tensor)>>> {
    let mut members: std::collections::HashMap<String, Tensor> = read_npz_bytes(bytes)?.into_iter().collect();
    names
        .iter()
        .enumerate()
        .map(|(s, sample)| {
            sample
                .iter()
                .enumerate()
                .map(|(k, name)| {
                    members
                        .remove(&format!("{s}.{k}"))
                        .map(|t| (name.clone(), t))
                        .ok_or_else(|| anyhow::anyhow!("member {s}.{k} is missing"))
                })
                .collect()
        })
        .collect()
}

/// The context of local runs: what changes the numbers a target gives on given inputs (the tool,
/// the model, the reference, the default inputs, the runtimes and thread count).
pub fn run_context(opts: &TriageOptions, model_sha256: &str) -> Result<String> {
    let mut h = Sha256::new();
    let mut put = |label: &str, text: &str| {
        h.update(label.as_bytes());
        h.update((text.len() as u64).to_le_bytes());
        h.update(text.as_bytes());
    };
    put("tool", env!("CARGO_PKG_VERSION"));
    put("model", model_sha256);
    put("reference", &reference_identity(opts)?);
    // The default inputs by content: the same files elsewhere are the same inputs.
    let inputs = &opts.audited.inputs;
    let gen: Vec<String> = inputs.gen.iter().map(ToString::to_string).collect();
    let shapes: Vec<String> = inputs.shapes.iter().map(ToString::to_string).collect();
    let generated = (&gen, inputs.seed, inputs.samples, &shapes);
    put("inputs", &format!("{generated:?}"));
    for npz in &inputs.npz {
        put("inputs-npz", &crate::foundation::hash::sha256_file(npz)?);
    }
    for file in &inputs.npy {
        put("inputs-npy", &file.name);
        put("inputs-npy", &crate::foundation::hash::sha256_file(&file.path)?);
    }
    let exec = &opts.exec;
    put("threads", &format!("{:?}", exec.threads));
    put("runtimes", &format!("{:?}", exec.runtimes));
    // Runs made on another kernel class are not this host's: the CPU EP and OpenVINO candidates
    // may compute other bits there, so a store shared by two classes keeps a context for each.
    put("host", &crate::foundation::host::this_host().isa_class);
    Ok(crate::foundation::hash::hex(&h.finalize()))
}

/// The context of report entries: the run context plus what turns measurements into verdicts.
pub fn entry_context(opts: &TriageOptions, run_context: &str) -> Result<String> {
    let mut h = Sha256::new();
    h.update(run_context.as_bytes());
    h.update(serde_json::to_string(&opts.thresholds)?.as_bytes());
    h.update(serde_json::to_string(&candidate_texts(opts))?.as_bytes());
    h.update(format!("{:?}", opts.defaults).as_bytes());
    // Whether the phone's own CPU is tried (and on which cores) changes verdicts: entries made
    // otherwise are not read back.
    match opts.phone_cpu {
        true => h.update(format!("{:?}", crate::data::target::arm_cores::CHIPSET_CPUS).as_bytes()),
        false => h.update(b"no-arm64"),
    }
    h.update(super::TRIAGE_SCHEMA_VERSION.to_le_bytes());
    Ok(crate::foundation::hash::hex(&h.finalize()))
}

/// The candidates as the user wrote them (what the store records of them).
fn candidate_texts(opts: &TriageOptions) -> Vec<&str> {
    opts.candidates.iter().map(|c| c.text.as_str()).collect()
}

/// The golden directory's manifest (which holds every output's hash) or the reference model's
/// hash.
fn reference_identity(opts: &TriageOptions) -> Result<String> {
    if let Some(dir) = &opts.audited.golden.stored {
        return crate::foundation::hash::sha256_file(&dir.join("manifest.json"));
    }
    match &opts.audited.golden.reference {
        Some(p) => crate::foundation::hash::sha256_file(p),
        None => Ok(String::new()),
    }
}

/// Where the store goes when `--db` is not given: `triage.db` in the user's data directory
/// (`$NPU_AUDIT_DATA`, else the platform's: `$XDG_DATA_HOME/npu-audit` when it is absolute, else
/// `~/.local/share/npu-audit` on Linux, found through the password database when `HOME` is
/// unset), never beside the reports, which are strangers' files and often a checked-out
/// repository.
pub fn default_path() -> Option<PathBuf> {
    let named = std::env::var_os("NPU_AUDIT_DATA")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let dir = named.or_else(|| dirs::data_dir().map(|d| d.join("npu-audit")))?;
    Some(dir.join(DEFAULT_FILE_NAME))
}
