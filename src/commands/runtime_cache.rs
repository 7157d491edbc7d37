//! `npu-audit runtime list|install|gc`: the runtime builds the catalogue knows, where each is on
//! this machine, and the cache the user installs into and sweeps.

use anyhow::Result;
use serde::Serialize;

use crate::execution::runtime::catalog::{catalogue, version_order, Role};
use crate::execution::runtime::{Build, Provisioner, RuntimeChoice};
use crate::foundation::error::bad_flag;

/// One row of `runtime list`: a release of a build, what the catalogue pins and records about
/// it, and where it is on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeRow {
    pub key: String,
    pub package: String,
    pub version: String,
    /// The release a target without `@` runs.
    pub default: bool,
    pub supported_here: bool,
    pub state: String,
    pub library: Option<String>,
    pub sha256: Option<String>,
    /// The pinned wheel for this platform: file and SHA-256 (`None`: fetched unpinned).
    pub wheel: Option<String>,
    pub wheel_sha256: Option<String>,
    /// A plugin: the core releases it was found to run on, and where it fails with the
    /// runtime's own words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs_on: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qnn_sdk: Option<String>,
}

/// The catalogue with where each release is on this machine: the default releases and any other
/// already in the cache, or (`all`) every release the catalogue knows.
pub fn runtime_rows(all: bool) -> Result<Vec<RuntimeRow>> {
    let p = Provisioner::new(&RuntimeChoice::default())?;
    let mut rows = Vec::new();
    for b in &catalogue().builds {
        let obstacle = b.obstacle();
        let supported = obstacle.is_none();
        let found = if supported { p.find(b)? } else { None };
        if !all && !b.is_default && found.is_none() {
            continue;
        }
        rows.push(RuntimeRow {
            key: b.key.clone(),
            package: b.package.clone(),
            version: b.version.clone(),
            default: b.is_default,
            supported_here: supported,
            state: match (&found, supported) {
                (_, false) => obstacle.unwrap_or_default(),
                (Some(rt), _) => rt.source.describe().into(),
                (None, true) => "not installed (fetched on first use)".into(),
            },
            library: found.as_ref().map(|r| r.library.display().to_string()),
            sha256: found.and_then(|r| r.sha256),
            wheel: b.pinned_wheel().map(|w| w.file.clone()),
            wheel_sha256: b.pinned_wheel().map(|w| w.sha256.clone()),
            runs_on: b.runs_on.clone(),
            refused: b
                .refused
                .iter()
                .map(|r| format!("{}: {}: {}", version_span(&r.cores), r.phase, r.error))
                .collect(),
            measured: b.measured.clone(),
            qnn_sdk: b.qnn_sdk.clone(),
        });
    }
    Ok(rows)
}

/// `1.24.1 .. 1.27.0` for a run of releases, or the one release.
pub fn version_span(versions: &[String]) -> String {
    match (versions.first(), versions.last()) {
        (Some(a), Some(b)) if a != b => format!("{a} .. {b}"),
        (Some(a), _) => a.clone(),
        _ => String::new(),
    }
}

/// Resolves `runtime install|path` names: `KEY` (its default release), `KEY@VERSION`,
/// `KEY@all` (every release that runs here), `all` (every default release usable here). A plugin
/// release brings the core it runs on by default. Naming a build this machine cannot use is an
/// error, not a download.
pub fn install_keys(keys: &[String]) -> Result<Vec<&'static Build>> {
    let mut out: Vec<&'static Build> = Vec::new();
    for k in keys {
        for b in resolve_name(k)? {
            if let Some(why) = b.obstacle() {
                return Err(bad_flag(format!("{} is of no use on this machine: {why}", b.label())));
            }
            let host = b.default_host();
            for x in [Some(b), host].into_iter().flatten() {
                if !out.iter().any(|o| o.label() == x.label()) {
                    out.push(x);
                }
            }
        }
    }
    Ok(out)
}

fn resolve_name(k: &str) -> Result<Vec<&'static Build>> {
    let families = catalogue().families().join(", ");
    if k == "all" {
        return Ok(catalogue()
            .builds
            .iter()
            .filter(|b| b.is_default && b.obstacle().is_none())
            .collect());
    }
    let (key, version) = match k.split_once('@') {
        Some((key, v)) => (key, Some(v)),
        None => (k, None),
    };
    let releases = catalogue().releases(key);
    if releases.is_empty() {
        return Err(bad_flag(format!(
            "unknown runtime '{k}' ({families}, all; a release as KEY@VERSION)"
        )));
    }
    let known = || {
        releases
            .iter()
            .map(|b| b.version.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match version {
        None => Ok(releases.into_iter().filter(|b| b.is_default).collect()),
        Some("all") => Ok(releases
            .into_iter()
            .filter(|b| b.obstacle().is_none() && (b.role == Role::Standalone || !b.runs_on.is_empty()))
            .collect()),
        Some(v) => match releases.iter().find(|b| b.version == v) {
            Some(b) => Ok(vec![*b]),
            None => Err(bad_flag(format!(
                "no release {v} of {key} in the catalogue (known: {})",
                known()
            ))),
        },
    }
}

/// One cached release as `runtime gc` sees it.
#[derive(Debug, Clone, Serialize)]
pub struct CachedBuild {
    pub dir: String,
    pub package: String,
    pub version: String,
    pub bytes: u64,
    /// Days since an audit last used it (from the cache's own record; `None`: never recorded).
    pub idle_days: Option<f64>,
    /// Whether it is to go (with `--dry-run`: would go).
    pub remove: bool,
    /// Whether it was removed.
    pub removed: bool,
    pub why: String,
}

/// Removes cached releases, compiled QNN contexts and evals' records not used for `keep_days`
/// days (never a default release, never one a running audit or eval holds locked), and what
/// killed fetches left behind;
/// with `dry_run`, only says what it would remove.
pub fn gc(keep_days: f64, dry_run: bool) -> Result<Vec<CachedBuild>> {
    let root = crate::execution::runtime::provision::cache_root().join("runtimes");
    let swept = if dry_run {
        0
    } else {
        crate::foundation::process::sweep_stale(&root, ".fetch-")
    };
    if swept > 0 {
        crate::foundation::console::note(format!("removed {swept} temporary director(ies) of killed fetches"));
    }
    let contexts = crate::execution::runtime::contexts::gc(keep_days, dry_run)
        .into_iter()
        .map(|e| entry_row(e, CONTEXT_PACKAGE))
        .chain(
            crate::commands::eval::records_cache::gc(keep_days, dry_run)
                .into_iter()
                .map(|e| entry_row(e, RECORDS_PACKAGE)),
        );
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Ok(contexts.collect());
    };
    let mut out = Vec::new();
    let mut in_use = 0;
    for dir in entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("manifest.json").is_file())
    {
        let Some(m) = crate::execution::runtime::provision::read_cached_manifest(&dir) else {
            continue;
        };
        let idle_days = std::fs::metadata(dir.join(crate::execution::runtime::provision::LAST_USED))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .map(|d| d.as_secs_f64() / 86400.0);
        let default = catalogue()
            .builds
            .iter()
            .any(|b| b.is_default && b.package == m.package && b.version == m.version);
        let (remove, why) = if default {
            (false, "a default release".to_string())
        } else {
            crate::execution::runtime::idle_verdict(idle_days, keep_days)
        };
        let (remove, removed, why) = remove_one(&dir, &m, remove, dry_run, why);
        in_use += usize::from(why.starts_with(IN_USE));
        out.push(CachedBuild {
            dir: dir.display().to_string(),
            package: m.package,
            version: m.version,
            bytes: m.files.iter().map(|f| f.size).sum(),
            idle_days,
            remove,
            removed,
            why,
        });
    }
    if in_use > 0 {
        crate::foundation::console::note(format!("kept {in_use} release(s) a running audit uses"));
    }
    out.sort_by(|a, b| a.package.cmp(&b.package).then(version_order(&a.version, &b.version)));
    out.extend(contexts);
    Ok(out)
}

/// The package name `runtime gc` gives compiled QNN contexts (`runtime::contexts`).
pub const CONTEXT_PACKAGE: &str = "qnn-context";

/// The package name `runtime gc` gives the records evals keep in the cache
/// (`eval::records_cache`).
pub const RECORDS_PACKAGE: &str = "eval-records";

/// A cache entry (a compiled QNN context, an eval's records) as a row of `runtime gc` under
/// `package`: what it holds in place of a release.
fn entry_row(e: crate::execution::runtime::GcEntry, package: &str) -> CachedBuild {
    CachedBuild {
        dir: e.dir.display().to_string(),
        package: package.into(),
        version: e.about,
        bytes: e.bytes,
        idle_days: e.idle_days,
        remove: e.remove,
        removed: e.removed,
        why: e.why,
    }
}

/// How `runtime gc` says a release is kept because a running audit holds it.
const IN_USE: &str = "in use by a running audit";

/// Removes one release gc chose (`remove`), unless a running audit holds it: (still to go,
/// removed, why).
fn remove_one(
    dir: &std::path::Path,
    m: &crate::execution::runtime::provision::CacheManifest,
    remove: bool,
    dry_run: bool,
    why: String,
) -> (bool, bool, String) {
    use crate::execution::runtime::provision::{in_use, remove_cached, Removal};
    let kept = |why: String| (false, false, format!("{IN_USE} ({why})"));
    match (remove, dry_run) {
        (false, _) => (false, false, why),
        (true, true) if in_use(dir, &m.package, &m.version) => kept(why),
        (true, true) => (true, false, why),
        (true, false) => match remove_cached(dir, &m.package, &m.version) {
            Removal::Removed => (true, true, why),
            Removal::InUse => kept(why),
            Removal::Failed => (true, false, format!("{why}; could not be removed")),
        },
    }
}
