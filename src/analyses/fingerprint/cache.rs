//! Cached fingerprints: one JSON file per (target, runtime libraries, probe set, tool version)
//! under the cache root, so `compare` can show a target's fingerprint without running the probes
//! every time. A different library (another version, or a file that changed) is another key.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::probes::PROBE_SET_VERSION;
use super::result::TargetFingerprint;
use crate::data::target::TargetSpec;
use crate::execution::runtime::{Runtime, TargetRuntime};
use crate::foundation::hash::{sha256_file, sha256_hex};

#[derive(Serialize, Deserialize)]
struct Entry {
    key: String,
    repeat: usize,
    fingerprint: TargetFingerprint,
}

fn library_identity(rt: &Runtime) -> String {
    let sha = rt
        .sha256
        .clone()
        .or_else(|| sha256_file(&rt.library).ok())
        .unwrap_or_else(|| rt.library.display().to_string());
    format!(
        "{} {} {}",
        rt.package,
        rt.version.as_deref().unwrap_or("unversioned"),
        &sha[..sha.len().min(16)]
    )
}

/// The libraries a target loads, by package, version and SHA-256 prefix.
pub fn runtime_identity(rt: &TargetRuntime) -> String {
    let mut s = library_identity(&rt.host);
    if let Some(p) = &rt.plugin {
        s.push_str(" + ");
        s.push_str(&library_identity(p));
    }
    s
}

/// The cache key: tool, probe set, target, libraries, and the kernel class the probes ran on
/// (a cache shared by hosts of two classes keeps one fingerprint per class).
fn key(spec: &TargetSpec, rt: &TargetRuntime) -> String {
    let class = spec.host_dependence(&crate::foundation::host::this_host()).isa_class;
    format!(
        "npu-audit {} | probes {PROBE_SET_VERSION} | {} | {} | {class}",
        env!("CARGO_PKG_VERSION"),
        spec.id,
        runtime_identity(rt)
    )
}

fn path_of(key: &str) -> PathBuf {
    crate::execution::runtime::provision::cache_root()
        .join("fingerprints")
        .join(format!("{}.json", &sha256_hex(key.as_bytes())[..32]))
}

/// The cached fingerprint of this target on these libraries, made with at least `repeat` runs
/// per probe.
pub fn load(spec: &TargetSpec, rt: &TargetRuntime, repeat: usize) -> Option<TargetFingerprint> {
    let key = key(spec, rt);
    let bytes = std::fs::read(path_of(&key)).ok()?;
    let entry: Entry = serde_json::from_slice(&bytes).ok()?;
    if entry.key != key || entry.repeat < repeat {
        return None;
    }
    let mut fp = entry.fingerprint;
    fp.cached = true;
    Some(fp)
}

/// Stores a fingerprint (written to a temporary name and renamed: concurrent audits never read
/// half a file).
pub fn store(spec: &TargetSpec, rt: &TargetRuntime, repeat: usize, fp: &TargetFingerprint) -> Result<()> {
    let key = key(spec, rt);
    let path = path_of(&key);
    let dir = path.parent().context("cache path has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let entry = Entry {
        key,
        repeat,
        fingerprint: fp.clone(),
    };
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    serde_json::to_writer(&tmp, &entry)?;
    tmp.persist(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
