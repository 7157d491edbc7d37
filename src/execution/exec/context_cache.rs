//! The worker's side of the compiled-context cache (`runtime::contexts`): the key of a QNN
//! session, the record stored beside its context model, and the worker's log around the
//! compilation.
//!
//! A loaded context model is not the model the audit placed: its QNN partitions are `EPContext`
//! nodes and ONNX Runtime logs nothing of the compilation. So the entry keeps what the compiling
//! session said (its recorded assignment, its partitioned graph, its log while it was created) and
//! a loaded session reports exactly that: the report of a run that loaded a context is the report
//! of the run that compiled it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::job::{EpSetup, Job, QNN_EP};
use crate::execution::runtime::contexts::{Entry, Lookup, Staged, Store};

/// The context model ONNX Runtime writes (`ep.context_file_path`) and later sessions load.
pub const CONTEXT_MODEL: &str = "model_ctx.onnx";

/// What the compiling session said, stored beside its context.
const RECORD: &str = "session.json";

/// Bumped when what an entry holds or how its key is made changes: older entries then miss.
const KEY_VERSION: &str = "npu-audit qnn context 1";

/// What the compiling session said about itself, replayed by a session that loads its context.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionRecord {
    pub placement: Vec<super::assignment::AssignedSubgraph>,
    pub placement_error: Option<String>,
    pub runtime_graph: Option<crate::data::model::topology::Topology>,
    /// The worker's log while the session was created (the EP's reasons for rejected nodes).
    pub log: String,
}

/// The cache as one QNN job uses it: the store and the job's key.
pub struct JobCache {
    store: Store,
    key: String,
    about: String,
}

impl JobCache {
    /// The cache of a QNN job that has one (`None`: another EP, or the cache is off). `Err`: the
    /// key could not be made (the model could not be read), so nothing is cached.
    pub fn of(job: &Job, ort_version: Option<&str>) -> Option<Result<JobCache>> {
        let EpSetup::Plugin {
            ep_name,
            context_cache: Some(root),
            ..
        } = &job.ep
        else {
            return None;
        };
        if ep_name != QNN_EP {
            return None;
        }
        Some(key_of(job, ort_version).map(|key| JobCache {
            store: Store::new(root.clone()),
            key,
            about: about(job),
        }))
    }

    /// The verified entry of this job, if there is one.
    pub fn lookup(&self) -> Lookup {
        self.store.lookup(&self.key)
    }

    /// Removes an entry ONNX Runtime could not load.
    pub fn remove(&self, entry: Entry) {
        let dir = entry.dir.clone();
        drop(entry);
        self.store.remove(&dir);
    }

    /// A staging directory for the context the session is about to write.
    pub fn stage(&self) -> Result<Staged> {
        self.store.stage()
    }

    /// Stores the staged context with the session's record.
    pub fn store(&self, staged: Staged, record: &SessionRecord) -> Result<()> {
        if !staged.path().join(CONTEXT_MODEL).is_file() {
            anyhow::bail!("ONNX Runtime wrote no context model");
        }
        std::fs::write(staged.path().join(RECORD), serde_json::to_vec(record)?)?;
        self.store.commit(&self.key, &self.about, staged)?;
        Ok(())
    }
}

/// The record stored in a verified entry.
pub fn read_record(entry: &Entry) -> Result<SessionRecord> {
    let bytes = std::fs::read(entry.dir.join(RECORD)).context("the entry has no session record")?;
    serde_json::from_slice(&bytes).context("the entry's session record is not readable")
}

/// The context model of a verified entry.
pub fn context_model(entry: &Entry) -> PathBuf {
    entry.dir.join(CONTEXT_MODEL)
}

/// The key of a job's compiled context: SHA-256 over everything that changes what QNN compiles
/// or what the session reports: the model's bytes and its external data, the EP options sorted,
/// the plugin and core releases, the graph optimization level, pinned dimensions, session
/// configuration and whether placement is inspected (the record then holds the verbose log and
/// the partitioned graph). Threads are not in it: they change no compiled graph.
fn key_of(job: &Job, ort_version: Option<&str>) -> Result<String> {
    let EpSetup::Plugin {
        ep_name,
        options,
        release,
        ..
    } = &job.ep
    else {
        anyhow::bail!("not a plugin EP");
    };
    let model = crate::data::model::load::load_model(&job.model)?;
    let mut text = vec![
        KEY_VERSION.to_string(),
        format!("model {}", crate::foundation::hash::sha256_file(&job.model)?),
    ];
    for f in model.external_data_hashes()? {
        text.push(format!("external {} {}", f.file, f.sha256));
    }
    let mut options = options.clone();
    options.sort();
    text.push(format!("ep {ep_name}"));
    text.extend(options.iter().map(|(k, v)| format!("option {k}={v}")));
    text.push(format!("release {release}"));
    text.push(format!("core {}", ort_version.unwrap_or("unknown")));
    text.push(format!("opt {:?}", job.opt));
    text.extend(job.free_dims.iter().map(|(k, v)| format!("dim {k}={v}")));
    let mut config = job.session_config.clone();
    config.sort();
    text.extend(config.iter().map(|(k, v)| format!("config {k}={v}")));
    text.push(format!("inspect {}", job.inspect_placement));
    Ok(crate::foundation::hash::sha256_hex(text.join("\n").as_bytes()))
}

/// The entry in words, for `runtime gc`: the model file, the target and the options that name
/// the chipset.
fn about(job: &Job) -> String {
    let chipset: Vec<String> = match &job.ep {
        EpSetup::Plugin { options, .. } => options
            .iter()
            .filter(|(k, _)| k == "soc_model" || k == "htp_arch")
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
        _ => Vec::new(),
    };
    format!(
        "{} on {} ({})",
        job.model.file_name().unwrap_or_default().to_string_lossy(),
        job.target_id,
        chipset.join(", ")
    )
}

/// The size of the worker's log (its stderr, a file the audit made), to cut out what a stretch
/// of the worker wrote; `None` when stderr is not a regular file.
pub fn log_mark() -> Option<u64> {
    let m = std::fs::metadata(log_path()).ok()?;
    m.is_file().then_some(m.len())
}

/// What the worker's log gained since `mark`.
pub fn log_since(mark: Option<u64>) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Some(start) = mark else {
        return String::new();
    };
    let mut text = Vec::new();
    let read = std::fs::File::open(log_path()).and_then(|mut f| {
        f.seek(SeekFrom::Start(start))?;
        f.read_to_end(&mut text)
    });
    match read {
        Ok(_) => String::from_utf8_lossy(&text).into_owned(),
        Err(_) => String::new(),
    }
}

/// Cuts the worker's log back to `mark`: what a session attempt that is retried wrote there must
/// not be read as the retried session's (its reasons for rejected nodes would count twice).
pub fn log_rewind(mark: Option<u64>) {
    let Some(len) = mark.and_then(|m| libc::off_t::try_from(m).ok()) else {
        return;
    };
    // SAFETY: truncating and seeking this process's own standard error, a regular file here (the
    // mark was read from it); nothing else holds a pointer into it.
    unsafe {
        if libc::ftruncate(2, len) == 0 {
            libc::lseek(2, len, libc::SEEK_SET);
        }
    }
}

/// This process's stderr, as a path.
fn log_path() -> &'static Path {
    Path::new("/proc/self/fd/2")
}
