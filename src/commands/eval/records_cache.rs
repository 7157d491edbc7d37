//! The records of evals kept in the tool's cache: an eval written to a file (`--out FILE`) without
//! `--records` keeps its checkpoint in `eval-records/<digest>/` of the runtime cache, named by the
//! digest of what the records are of (the records context of a whole eval, a shard's identity),
//! so the same command run again finds it and resumes, and nothing is left beside the report.
//! `runtime gc` lists the entries and removes those unused for `--keep-days`, never one an eval
//! holds locked.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::execution::runtime::GcEntry;

/// The directory of the cache that holds the entries.
pub fn root() -> PathBuf {
    crate::execution::runtime::provision::cache_root().join("eval-records")
}

/// The entry of the records `of` (a records context, or a shard's identity): the first 32 hex
/// digits of the SHA-256 of its JSON, the set named by its absolute path (one named `set/` from
/// two directories is two sets). An eval of anything else (model, set, labels, task, runs,
/// runtimes, threads, host class, release) has another entry.
pub fn cached_dir(of: &serde_json::Value) -> PathBuf {
    let mut key = of.clone();
    if let Some(set) = of.get("dataset").and_then(serde_json::Value::as_str) {
        if let Ok(absolute) = std::fs::canonicalize(set) {
            key["dataset"] = absolute.display().to_string().into();
        }
    }
    let bytes = serde_json::to_vec(&key).unwrap_or_default();
    root().join(&crate::foundation::hash::sha256_hex(&bytes)[..32])
}

/// How `runtime gc` says an entry is kept because an eval holds it.
pub const IN_USE: &str = "in use by a running eval";

/// Removes the entries not used for `keep_days` days, never one an eval holds locked; with
/// `dry_run` only says what it would remove.
pub fn gc(keep_days: f64, dry_run: bool) -> Vec<GcEntry> {
    let Ok(entries) = std::fs::read_dir(root()) else {
        return Vec::new();
    };
    let mut out: Vec<GcEntry> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| gc_one(&e.path(), keep_days, dry_run))
        .collect();
    out.sort_by(|a, b| a.about.cmp(&b.about).then(a.dir.cmp(&b.dir)));
    out
}

fn gc_one(dir: &Path, keep_days: f64, dry_run: bool) -> GcEntry {
    let tree = tree_of(dir);
    let newest = tree.iter().filter_map(|(_, m)| m.modified().ok()).max();
    let idle_days = newest
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .map(|d| d.as_secs_f64() / 86400.0);
    let (remove, why) = crate::execution::runtime::idle_verdict(idle_days, keep_days);
    let mut entry = GcEntry {
        dir: dir.to_path_buf(),
        about: about(dir),
        bytes: tree.iter().filter(|(_, m)| m.is_file()).map(|(_, m)| m.len()).sum(),
        idle_days,
        remove,
        removed: false,
        why,
    };
    if !remove {
        return entry;
    }
    // Every directory of the entry (a shard's windows are directories of their own) is locked
    // by the eval that writes it; all are held while the entry goes.
    let locks: Option<Vec<File>> = std::iter::once(dir.to_path_buf())
        .chain(tree.iter().filter(|(_, m)| m.is_dir()).map(|(p, _)| p.clone()))
        .map(|d| File::open(d).ok().filter(|f| f.try_lock().is_ok()))
        .collect();
    if locks.is_none() {
        entry.remove = false;
        entry.why = format!("{IN_USE} ({})", entry.why);
    } else if !dry_run {
        let _ = std::fs::remove_dir_all(dir);
        entry.removed = !dir.exists();
        if !entry.removed {
            entry.why.push_str("; could not be removed");
        }
    }
    entry
}

/// Every file and directory in `dir`, two levels deep (a shard's windows), links not followed.
fn tree_of(dir: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let list = |d: &Path| -> Vec<(PathBuf, std::fs::Metadata)> {
        std::fs::read_dir(d)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter_map(|e| std::fs::symlink_metadata(e.path()).ok().map(|m| (e.path(), m)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut all = list(dir);
    let subdirs: Vec<PathBuf> = all.iter().filter(|(_, m)| m.is_dir()).map(|(p, _)| p.clone()).collect();
    for sub in subdirs {
        all.extend(list(&sub));
    }
    all
}

/// What an entry's records are of: the set and the runs its `context.json` (or a shard's
/// `shard.json`) names; else its name.
fn about(dir: &Path) -> String {
    let read = |name: &str| -> Option<serde_json::Value> {
        let path = dir.join(name);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if !meta.is_file() || meta.len() > 1 << 20 {
            return None;
        }
        serde_json::from_slice(&std::fs::read(&path).ok()?).ok()
    };
    let key = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let Some(v) = read("context.json").or_else(|| read("shard.json")) else {
        return key;
    };
    let runs: Vec<&str> = v["runs"]
        .as_array()
        .map(|r| r.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    let shard = match (v["shard"].get(0), v["shard"].get(1)) {
        (Some(i), Some(n)) => format!(" shard {i}/{n}"),
        _ => String::new(),
    };
    crate::foundation::console::printable(&format!(
        "eval{shard} of {} on {}",
        v["dataset"].as_str().unwrap_or("?"),
        runs.join(", ")
    ))
}
