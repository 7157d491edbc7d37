//! The cache of compiled QNN contexts: a QNN session compiled once writes its context model (ONNX
//! Runtime's EPContext, `ep.context_enable`) into an entry here, and later sessions of the same
//! model, options and releases load it instead of compiling again (seconds to milliseconds).
//!
//! An entry is a directory `<root>/<key>/` with the files the worker stored and a
//! `manifest.json` holding the SHA-256 of each; it is verified on every lookup, and an entry whose
//! files do not match is removed (the session is then compiled afresh). Entries are written in a
//! staging directory and renamed into place, so a reader never sees half of one and two writers
//! racing on one key leave one complete entry. A reader holds a shared lock on `.<key>.lock` from
//! the lookup until its session is created; `runtime gc` removes an entry only when it can lock it
//! exclusively, and the lock file's modification time is the entry's last use.

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::GcEntry;

/// The variable that moves the context cache elsewhere than the runtime cache (tests give each
/// run its own; a shared read-only runtime cache can keep its contexts on a writable disk).
pub const DIR_ENV: &str = "NPU_AUDIT_CONTEXT_DIR";

/// The manifest of an entry: what it was made for and the hash of every file in it.
const MANIFEST: &str = "manifest.json";

/// Prefix of the directories an entry is written in before it is renamed into place.
const STAGE_PREFIX: &str = ".stage-";

/// Prefix of an entry being removed (renamed first, so no reader finds half of it).
const TRASH_PREFIX: &str = ".trash-";

/// Where compiled contexts are kept: `NPU_AUDIT_CONTEXT_DIR`, else `qnn-contexts` in the runtime
/// cache (`--cache-dir`, `NPU_AUDIT_CACHE`).
pub fn store_root() -> PathBuf {
    match std::env::var_os(DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => super::provision::cache_root().join("qnn-contexts"),
    }
}

/// One file of an entry as its manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StoredFile {
    name: String,
    size: u64,
    sha256: String,
}

/// What an entry's `manifest.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Manifest {
    key: String,
    /// What the context was compiled for, in words (model, target, releases): for `runtime gc`.
    about: String,
    files: Vec<StoredFile>,
}

/// The outcome of looking a key up.
pub enum Lookup {
    /// A complete entry whose every file matches its manifest, locked until the value is dropped.
    Hit(Entry),
    /// No entry for this key.
    Miss,
    /// There was an entry and it did not match its manifest (the reason): it has been removed.
    Corrupt(String),
}

/// A verified entry, held (shared lock) while the value lives.
pub struct Entry {
    /// The entry's directory.
    pub dir: PathBuf,
    _lock: File,
}

/// An entry being written: a marked directory in the store, removed when dropped uncommitted.
pub struct Staged {
    dir: tempfile::TempDir,
}

impl Staged {
    /// Where the files of the entry go.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// The context cache at one root.
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// The store at `root` (created on first write).
    pub fn new(root: PathBuf) -> Store {
        Store { root }
    }

    fn lock_path(&self, key: &str) -> PathBuf {
        self.root.join(format!(".{key}.lock"))
    }

    /// Looks `key` up and verifies the entry's every file against its manifest; a corrupt entry
    /// is removed. A hit records the entry's use and holds it until dropped.
    pub fn lookup(&self, key: &str) -> Lookup {
        let dir = self.root.join(key);
        if !dir.is_dir() {
            return Lookup::Miss;
        }
        let lock = match open_lock(&self.lock_path(key)) {
            Ok(f) if f.lock_shared().is_ok() => f,
            // A store this process cannot lock is not used at all.
            _ => return Lookup::Miss,
        };
        // `runtime gc` may have removed it before the lock was taken.
        if !dir.is_dir() {
            return Lookup::Miss;
        }
        match verify(&dir, key) {
            Ok(()) => {
                let _ = lock.set_modified(std::time::SystemTime::now());
                Lookup::Hit(Entry { dir, _lock: lock })
            }
            Err(why) => {
                drop(lock);
                self.remove(&dir);
                Lookup::Corrupt(format!("{why:#}"))
            }
        }
    }

    /// A fresh staging directory in the store for a new entry.
    pub fn stage(&self) -> Result<Staged> {
        std::fs::create_dir_all(&self.root)
            .with_context(|| format!("cannot create the context cache {}", self.root.display()))?;
        let dir = tempfile::Builder::new()
            .prefix(STAGE_PREFIX)
            .tempdir_in(&self.root)
            .with_context(|| format!("cannot stage a context in {}", self.root.display()))?;
        crate::foundation::process::mark_owned(dir.path())?;
        Ok(Staged { dir })
    }

    /// Hashes every file of `staged` into its manifest and renames it into place as `key`.
    /// `Ok(false)`: another worker stored the same key first (its entry is kept, this one
    /// dropped).
    pub fn commit(&self, key: &str, about: &str, staged: Staged) -> Result<bool> {
        let mut files = Vec::new();
        for e in std::fs::read_dir(staged.path())? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name == crate::foundation::process::OWNER_MARKER || !e.file_type()?.is_file() {
                continue;
            }
            let size = e.metadata()?.len();
            let sha256 = crate::foundation::hash::sha256_file(&e.path())?;
            files.push(StoredFile { name, size, sha256 });
        }
        files.sort_by(|a, b| a.name.cmp(&b.name));
        let manifest = Manifest {
            key: key.to_string(),
            about: about.to_string(),
            files,
        };
        std::fs::write(staged.path().join(MANIFEST), serde_json::to_vec_pretty(&manifest)?)?;
        let _ = std::fs::remove_file(staged.path().join(crate::foundation::process::OWNER_MARKER));
        let dir = staged.dir.keep();
        let dest = self.root.join(key);
        match std::fs::rename(&dir, &dest) {
            Ok(()) => {
                if let Ok(lock) = open_lock(&self.lock_path(key)) {
                    let _ = lock.set_modified(std::time::SystemTime::now());
                }
                Ok(true)
            }
            Err(_) if dest.is_dir() => {
                let _ = std::fs::remove_dir_all(&dir);
                Ok(false)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e).with_context(|| format!("cannot store the context as {}", dest.display()))
            }
        }
    }

    /// Removes an entry: renamed aside first, so no reader finds part of it.
    pub fn remove(&self, dir: &Path) {
        let aside = self.root.join(format!(
            "{TRASH_PREFIX}{}-{}",
            std::process::id(),
            dir.file_name().unwrap_or_default().to_string_lossy()
        ));
        if std::fs::rename(dir, &aside).is_ok() {
            let _ = std::fs::remove_dir_all(&aside);
        }
    }
}

/// Opens (creating) an entry's lock file; read-only when the store is not writable (a lock
/// still holds on it).
fn open_lock(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .or_else(|_| File::open(path))
}

/// Checks that `dir` holds the manifest of `key` and exactly the files it lists: each a regular
/// file of the entry (a plain name, no path), of its size and SHA-256, and no file it does not
/// list (a session loads the entry as a whole, so a file the manifest leaves out would be loaded
/// unchecked).
fn verify(dir: &Path, key: &str) -> Result<()> {
    let manifest = read_manifest(dir)?;
    if manifest.key != key {
        bail!("its manifest names another key");
    }
    if manifest.files.is_empty() {
        bail!("its manifest lists no file");
    }
    let plain = |name: &str| {
        let mut parts = Path::new(name).components();
        matches!((parts.next(), parts.next()), (Some(std::path::Component::Normal(n)), None) if n == name)
            && name != MANIFEST
    };
    if let Some(f) = manifest.files.iter().find(|f| !plain(&f.name)) {
        bail!("its manifest names '{}', not a file of the entry", f.name);
    }
    for e in std::fs::read_dir(dir)? {
        let raw = e?.file_name();
        // Compared as they are: a name that is not UTF-8 cannot be one the manifest lists.
        let Some(name) = raw.to_str() else {
            bail!("it holds a file whose name is not UTF-8, which its manifest cannot list");
        };
        if name != MANIFEST && !manifest.files.iter().any(|f| f.name == name) {
            bail!("it holds {name}, which its manifest does not list");
        }
    }
    for f in &manifest.files {
        let path = dir.join(&f.name);
        let meta = std::fs::symlink_metadata(&path).with_context(|| format!("{} is missing", f.name))?;
        if !meta.file_type().is_file() {
            bail!("{} is not a regular file", f.name);
        }
        let size = meta.len();
        if size != f.size {
            bail!("{} has {size} bytes, its manifest says {}", f.name, f.size);
        }
        if crate::foundation::hash::sha256_file(&path)? != f.sha256 {
            bail!("{} does not match its SHA-256", f.name);
        }
    }
    Ok(())
}

fn read_manifest(dir: &Path) -> Result<Manifest> {
    let bytes = std::fs::read(dir.join(MANIFEST)).context("its manifest is missing")?;
    serde_json::from_slice(&bytes).context("its manifest is not readable")
}

/// Removes the entries not used for `keep_days` days (never one a running session holds), the
/// staging directories of killed workers and unreadable entries; with `dry_run` only says what
/// it would remove.
pub fn gc(keep_days: f64, dry_run: bool) -> Vec<GcEntry> {
    let store = Store::new(store_root());
    if !dry_run {
        crate::foundation::process::sweep_stale(&store.root, STAGE_PREFIX);
    }
    let Ok(entries) = std::fs::read_dir(&store.root) else {
        return Vec::new();
    };
    let mut out: Vec<GcEntry> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| gc_one(&store, &e.path(), keep_days, dry_run))
        .collect();
    out.sort_by(|a, b| a.about.cmp(&b.about).then(a.dir.cmp(&b.dir)));
    out
}

/// How `runtime gc` says an entry is kept because a session holds it.
pub const IN_USE: &str = "in use by a running audit";

fn gc_one(store: &Store, dir: &Path, keep_days: f64, dry_run: bool) -> GcEntry {
    let key = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let manifest = read_manifest(dir).ok();
    let idle_days = std::fs::metadata(store.lock_path(&key))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .map(|d| d.as_secs_f64() / 86400.0);
    let (remove, why) = match &manifest {
        None => (true, "no readable manifest".to_string()),
        Some(_) => super::idle_verdict(idle_days, keep_days),
    };
    let mut entry = GcEntry {
        dir: dir.to_path_buf(),
        about: manifest.as_ref().map_or_else(|| key.clone(), |m| m.about.clone()),
        bytes: dir_bytes(dir),
        idle_days,
        remove,
        removed: false,
        why,
    };
    if !remove {
        return entry;
    }
    let lock = open_lock(&store.lock_path(&key));
    let free = lock.as_ref().is_ok_and(|l| l.try_lock().is_ok());
    if !free {
        entry.remove = false;
        entry.why = format!("{IN_USE} ({})", entry.why);
    } else if !dry_run {
        store.remove(dir);
        entry.removed = !dir.exists();
        if entry.removed {
            let _ = std::fs::remove_file(store.lock_path(&key));
        } else {
            entry.why.push_str("; could not be removed");
        }
    }
    entry
}

/// Bytes of the regular files directly in `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(store: &Store, key: &str, body: &[u8]) {
        let staged = store.stage().expect("stage");
        std::fs::write(staged.path().join("model_ctx.onnx"), body).expect("write");
        assert!(store.commit(key, "test", staged).expect("commit"));
    }

    #[test]
    fn an_entry_is_found_verified_and_a_corrupt_one_removed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = Store::new(tmp.path().join("ctx"));
        assert!(matches!(store.lookup("k1"), Lookup::Miss));
        stored(&store, "k1", b"compiled context");
        match store.lookup("k1") {
            Lookup::Hit(e) => assert_eq!(
                std::fs::read(e.dir.join("model_ctx.onnx")).expect("read"),
                b"compiled context"
            ),
            _ => panic!("no hit"),
        }
        // A second writer of the same key keeps the first entry.
        let staged = store.stage().expect("stage");
        std::fs::write(staged.path().join("model_ctx.onnx"), b"other").expect("write");
        assert!(!store.commit("k1", "test", staged).expect("commit"));
        // One byte flipped: the entry is removed, never loaded.
        let path = tmp.path().join("ctx/k1/model_ctx.onnx");
        std::fs::write(&path, b"compiled contexT").expect("write");
        match store.lookup("k1") {
            Lookup::Corrupt(why) => assert!(why.contains("SHA-256"), "{why}"),
            _ => panic!("a corrupt entry was not reported"),
        }
        assert!(!tmp.path().join("ctx/k1").exists());
        assert!(matches!(store.lookup("k1"), Lookup::Miss));
        // A manifest that leaves a file out, or names one outside the entry: never loaded.
        let corrupt = |edit: &dyn Fn(&Path), want: &str| {
            stored(&store, "k2", b"compiled context");
            edit(&tmp.path().join("ctx/k2"));
            match store.lookup("k2") {
                Lookup::Corrupt(why) => assert!(why.contains(want), "{want}: {why}"),
                _ => panic!("{want}: the entry was used"),
            }
            assert!(!tmp.path().join("ctx/k2").exists());
        };
        let rewrite = |dir: &Path, f: &dyn Fn(&mut serde_json::Value)| {
            let mut m: serde_json::Value =
                serde_json::from_slice(&std::fs::read(dir.join(MANIFEST)).expect("manifest")).expect("json");
            f(&mut m);
            std::fs::write(dir.join(MANIFEST), serde_json::to_vec(&m).expect("json")).expect("write");
        };
        corrupt(
            &|d| rewrite(d, &|m| m["files"][0]["name"] = "../../victim.txt".into()),
            "not a file of the entry",
        );
        corrupt(
            &|d| {
                std::fs::write(d.join("extra.onnx"), b"foreign").expect("write");
            },
            "which its manifest does not list",
        );
        corrupt(
            &|d| {
                std::fs::write(d.join("other.bin"), b"x").expect("write");
                rewrite(d, &|m| {
                    let first = m["files"][0].clone();
                    m["files"] = serde_json::json!([first]);
                    m["files"][0]["name"] = "other.bin".into();
                });
            },
            "model_ctx.onnx, which its manifest does not list",
        );
        // A name that is not UTF-8 is not read as the listed name it decodes to, lossily.
        corrupt(
            &|d| {
                use std::os::unix::ffi::OsStrExt;
                let name = std::ffi::OsStr::from_bytes(b"model_ctx.onnx\xff");
                std::fs::write(d.join(name), b"foreign").expect("write");
            },
            "not UTF-8",
        );
    }

    #[test]
    fn gc_keeps_an_entry_in_use() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = Store::new(tmp.path().to_path_buf());
        stored(&store, "k2", b"x");
        let held = match store.lookup("k2") {
            Lookup::Hit(e) => e,
            _ => panic!("no hit"),
        };
        let kept = gc_one(&store, &tmp.path().join("k2"), 0.0, false);
        assert!(!kept.removed && kept.why.starts_with(IN_USE), "{}", kept.why);
        drop(held);
        let gone = gc_one(&store, &tmp.path().join("k2"), 0.0, false);
        assert!(gone.removed, "{}", gone.why);
        assert!(!tmp.path().join("k2").exists());
    }
}
