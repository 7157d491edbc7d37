//! Files the user named: read (`-` is standard input), or written because the user asked for
//! them. A file is written only where the user pointed (never through a device, a FIFO or a
//! directory, never over one of the run's own inputs), keeps the mode an existing file had, and
//! every output of a run is committed together or not at all: each is first written in full to a
//! temporary file beside its destination ([`Outputs`]), and only when all of them are written are
//! they renamed into place; a failure anywhere removes them all. `-` is standard output.

use std::fs::{File, Metadata, Permissions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::foundation::error::{bad_output, OutputError};

/// Whether a path names standard input or output (`-`).
pub fn is_stdio(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// The most a file the user names (a report, a policy, an archive) is read into memory: more
/// than this is a mistake (`/dev/zero`) or an attack, not an input.
pub const MAX_READ_BYTES: u64 = 1 << 30;

/// The bytes of a file the user named, or of standard input for `-`. A pipe (`<(...)`) is read
/// like a file, but never beyond [`MAX_READ_BYTES`].
pub fn read_user_file(path: &Path) -> std::io::Result<Vec<u8>> {
    read_capped(path, MAX_READ_BYTES)
}

/// The bytes of a file the user named (standard input for `-`), at most `cap` of them: a file
/// larger than its format can be is refused before it fills memory. The one size-capped read of
/// the tool, with [`read_limited`] for a reader already open.
pub fn read_capped(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    if is_stdio(path) {
        read_limited(std::io::stdin(), cap)
    } else {
        read_limited(File::open(path)?, cap)
    }
}

/// Everything `reader` holds, at most `cap` bytes; more is an error saying the cap.
pub fn read_limited(reader: impl std::io::Read, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    reader.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {}", size_words(cap)),
        ));
    }
    Ok(bytes)
}

/// A size cap in words: whole MiB when it is one, else bytes.
fn size_words(cap: u64) -> String {
    if cap >= 1 << 20 && cap.is_multiple_of(1 << 20) {
        format!("{} MiB", cap >> 20)
    } else {
        format!("{cap} bytes")
    }
}

/// Checks that `path` is a regular file (following links), for files a format says are files:
/// a link to a device or a FIFO there is refused before anything reads it.
pub fn regular_file(path: &Path) -> std::io::Result<()> {
    let meta = std::fs::metadata(path)?;
    if meta.is_file() {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}, not a regular file", kind_of(&meta)),
        ))
    }
}

/// How a path is named in messages: `standard input` for `-`.
pub fn shown(path: &Path) -> String {
    if is_stdio(path) {
        "standard input".into()
    } else {
        path.display().to_string()
    }
}

/// What a file is, in words (for "X is a FIFO, not a regular file"; metadata read without
/// following links names a link as one).
pub fn kind_of(meta: &Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if meta.is_dir() {
        "a directory"
    } else if meta.file_type().is_symlink() {
        "a symbolic link"
    } else if meta.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}

/// Checks a directory the user named for outputs (`flag` names it in the message): absent, or
/// a directory (following links); a file, device or FIFO there is refused.
pub fn check_dir_destination(flag: &str, dir: &Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => {
            let kind = if m.is_file() { "a file" } else { kind_of(&m) };
            Err(bad_output(format!(
                "{flag} {} is {kind}, not a directory",
                dir.display()
            )))
        }
        _ => Ok(()),
    }
}

/// A file or directory, identified by device and inode so that another path to it (a hard
/// link, `./x`, a symlink) is recognised too.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

fn file_id(path: &Path) -> Option<FileId> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// The file standard input is redirected from, if it is a regular file (not a pipe or a terminal).
fn stdin_file_id() -> Option<FileId> {
    #[cfg(unix)]
    {
        let stdin = Path::new("/dev/stdin");
        std::fs::metadata(stdin).ok().filter(std::fs::Metadata::is_file)?;
        file_id(stdin)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Every file a command reads, declared once on its options ([`Reads`]): the files the user
/// named, and the directories it reads files from (a golden run, a fleet of device reports, a
/// report directory, a runtime directory). [`Outputs`] is built from it, so that no output of
/// the command can replace one of them, whichever flag names it.
#[derive(Debug, Clone, Default)]
pub struct InputFiles {
    paths: Vec<PathBuf>,
    /// Whether `-` was named: standard input, which may be a file redirected in.
    stdin: bool,
}

impl InputFiles {
    /// An empty set (a command that reads no file the user named).
    pub fn new() -> InputFiles {
        InputFiles::default()
    }

    /// Adds a file, or a directory (then every file under it). Paths that do not exist are
    /// ignored: nothing can replace them. `-` is standard input, guarded only when it is
    /// redirected from a file.
    pub fn add(&mut self, path: &Path) -> &mut InputFiles {
        self.stdin |= is_stdio(path);
        if !is_stdio(path) && !path.as_os_str().is_empty() && !self.paths.iter().any(|p| p == path) {
            self.paths.push(path.to_path_buf());
        }
        self
    }

    /// Adds every path of `paths`.
    pub fn add_all<'p>(&mut self, paths: impl IntoIterator<Item = &'p PathBuf>) -> &mut InputFiles {
        for p in paths {
            self.add(p);
        }
        self
    }

    /// Adds what `part` reads.
    pub fn with(&mut self, part: &(impl Reads + ?Sized)) -> &mut InputFiles {
        part.declare(self);
        self
    }

    /// The paths as declared.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

/// What a command's options (or a part of them) read. Implementations destructure their type
/// without `..`, so that a new field that names a file does not compile until it is declared
/// here or said to name none.
pub trait Reads {
    /// Adds every file and directory these options read to `set`.
    fn declare(&self, set: &mut InputFiles);

    /// The files and directories these options read.
    fn reads(&self) -> InputFiles {
        let mut set = InputFiles::new();
        self.declare(&mut set);
        set
    }
}

impl<T: Reads> Reads for Option<T> {
    fn declare(&self, set: &mut InputFiles) {
        if let Some(t) = self {
            t.declare(set);
        }
    }
}

impl<T: Reads> Reads for [T] {
    fn declare(&self, set: &mut InputFiles) {
        for t in self {
            t.declare(set);
        }
    }
}

impl<T: Reads> Reads for Vec<T> {
    fn declare(&self, set: &mut InputFiles) {
        self.as_slice().declare(set);
    }
}

/// The most files of an input directory whose identities the guard records: beyond it, paths
/// inside the directory are still refused (a hard link elsewhere to a file in a huge tree is
/// then not recognised, which cannot change what the run reads: outputs are renamed into place,
/// never written through an existing file).
const MAX_TREE_FILES: usize = 200_000;

/// An input directory as the guard knows it: as named, and resolved.
#[derive(Debug, Clone)]
struct InputTree {
    shown: PathBuf,
    real: PathBuf,
    /// A directory the run writes itself (its records), not one of its inputs.
    own: bool,
}

/// The path `path` names, with its existing part resolved (links followed) and the rest as
/// given: where a file that does not exist yet would be.
fn resolved(path: &Path) -> Option<PathBuf> {
    let mut missing: Vec<std::ffi::OsString> = Vec::new();
    let mut at = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(path)
    };
    loop {
        if let Ok(real) = at.canonicalize() {
            return Some(missing.iter().rev().fold(real, |p, c| p.join(c)));
        }
        missing.push(at.file_name()?.to_os_string());
        at = at.parent()?.to_path_buf();
    }
}

/// Every regular file under `dir` (links not followed), at most [`MAX_TREE_FILES`].
fn files_in(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if out.len() >= MAX_TREE_FILES {
            return;
        }
        match entry.file_type() {
            Ok(t) if t.is_dir() => files_in(&entry.path(), out),
            Ok(t) if t.is_file() => out.push(entry.path()),
            _ => {}
        }
    }
}

/// The file a destination really names: a symlink is followed to its target (written there, the
/// link kept). `Ok(None)` for a new file.
fn resolve(flag: &str, path: &Path) -> Result<(PathBuf, Option<Metadata>)> {
    let link = std::fs::symlink_metadata(path).ok();
    let is_link = link.as_ref().is_some_and(|m| m.file_type().is_symlink());
    let target = if is_link {
        std::fs::canonicalize(path).map_err(|_| {
            bad_output(format!(
                "{flag} {} is a symbolic link to a missing file; name the file itself",
                path.display()
            ))
        })?
    } else {
        path.to_path_buf()
    };
    match std::fs::metadata(&target) {
        Ok(m) if m.is_file() => Ok((target, Some(m))),
        Ok(m) => Err(bad_output(format!(
            "{flag} {} is {}, not a file it can write",
            path.display(),
            kind_of(&m)
        ))),
        Err(_) => Ok((target, None)),
    }
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// An error while writing an output: a full disk is the machine's problem (exit 4), anything
/// else the destination's (exit 2).
fn write_error(flag: &str, path: &Path, e: &std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::StorageFull {
        let dir = parent_of(path);
        OutputError::NoSpace(format!(
            "{flag} {}: no space left on the device of {} ({e})",
            path.display(),
            dir.display()
        ))
        .into()
    } else {
        bad_output(format!("{flag} {}: cannot write: {e}", path.display()))
    }
}

/// One file written in full beside its destination, waiting to be renamed into place.
struct StagedFile {
    flag: String,
    temp: tempfile::TempPath,
    dest: PathBuf,
    /// A new file: never replaces what is at `dest` (see [`Outputs::new_file`]).
    fresh: bool,
}

/// Refuses `dest` for a new file when anything is there: a file, a directory, a link (dangling
/// or not), a device.
fn refuse_existing(flag: &str, dest: &Path) -> Result<()> {
    match std::fs::symlink_metadata(dest) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(bad_output(format!("{flag} {}: {e}", dest.display()))),
        Ok(m) => Err(bad_output(format!(
            "{flag} {} exists ({}): it is never replaced nor written through; remove it or choose another name",
            dest.display(),
            if m.file_type().is_symlink() {
                "a symbolic link"
            } else if m.is_file() {
                "a file"
            } else {
                kind_of(&m)
            }
        ))),
    }
}

/// Every output of one run: checked, staged, and committed together.
#[derive(Default)]
pub struct Outputs {
    inputs: Vec<(PathBuf, FileId)>,
    trees: Vec<InputTree>,
    staged: Vec<StagedFile>,
    /// Directories created for outputs, removed again if the run fails.
    created: Vec<PathBuf>,
}

impl Outputs {
    /// The outputs of a command that reads `inputs` (its options' [`Reads::reads`]): none may
    /// replace one of them, nor be written inside a directory it reads.
    pub fn new(inputs: &InputFiles) -> Outputs {
        let mut outputs = Outputs::default();
        outputs.add_inputs(inputs);
        outputs
    }

    /// The outputs of a run that writes nothing of its own (an audit run inside another
    /// command, whose files that command writes).
    pub fn none() -> Outputs {
        Outputs::default()
    }

    /// Adds inputs discovered while the run goes (a model's external data).
    pub fn add_inputs(&mut self, inputs: &InputFiles) {
        // `render - --out r.json < r.json`: standard input redirected from a file is that file,
        // which an output must not replace either.
        if let Some(id) = inputs.stdin.then(stdin_file_id).flatten() {
            self.inputs.push((PathBuf::from("standard input"), id));
        }
        for path in inputs.paths() {
            let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
            if is_dir {
                let Some(real) = resolved(path) else { continue };
                let mut files = Vec::new();
                files_in(&real, &mut files);
                self.inputs
                    .extend(files.into_iter().filter_map(|f| Some((f.clone(), file_id(&f)?))));
                self.trees.push(InputTree {
                    shown: path.clone(),
                    real,
                    own: false,
                });
            } else if let Some(id) = file_id(path) {
                self.inputs.push((path.clone(), id));
            }
        }
    }

    /// Keeps every output out of `dir`, a directory the run reads and writes itself (an eval's
    /// records): a report named inside it would replace the run's own files, or be replaced.
    pub fn reserve_dir(&mut self, dir: &Path) {
        if let Some(real) = resolved(dir) {
            self.trees.push(InputTree {
                shown: dir.to_path_buf(),
                real,
                own: true,
            });
        }
    }

    /// The input directory `target` (resolved) lies in, if any.
    fn tree_holding(&self, target: &Path) -> Option<&InputTree> {
        let real = resolved(target)?;
        self.trees.iter().find(|t| real.starts_with(&t.real))
    }

    /// Checks, before any work, that `path` can be written for `flag`: not a device, FIFO or
    /// directory, not one of the run's inputs, in a directory that exists and takes files.
    pub fn check(&self, flag: &str, path: &Path) -> Result<()> {
        if is_stdio(path) {
            return Ok(());
        }
        let (target, existing) = resolve(flag, path)?;
        if let Some((input, _)) = existing.and_then(|_| self.input_at(&target)) {
            return Err(bad_output(format!(
                "{flag} {} is {}, one of this run's inputs; choose another file",
                path.display(),
                input.display()
            )));
        }
        if let Some(tree) = self.tree_holding(&target) {
            return Err(inside_input_dir(flag, path, tree));
        }
        let parent = parent_of(&target);
        if !parent.is_dir() {
            return Err(bad_output(format!(
                "{flag} {}: directory {} does not exist",
                path.display(),
                parent.display()
            )));
        }
        tempfile::NamedTempFile::new_in(&parent).map(|_| ()).map_err(|e| {
            bad_output(format!(
                "{flag} {}: cannot write into {}: {e}",
                path.display(),
                parent.display()
            ))
        })
    }

    /// Checks, before any work, that `path` can be written as a new file for `flag`: nothing is
    /// there (not even a link), and [`Outputs::check`]'s conditions.
    pub fn check_new(&self, flag: &str, path: &Path) -> Result<()> {
        self.check(flag, path)?;
        refuse_existing(flag, path)
    }

    /// Writes `bytes` as the new file `dest`: refused when anything is there already (a link
    /// included, never written through), and committed without replacing what may appear there
    /// while the run goes. For files meant to leave the machine (a vendor's bundle).
    pub fn new_file(&mut self, flag: &str, dest: &Path, bytes: &[u8]) -> Result<()> {
        self.check_new(flag, dest)?;
        self.file(flag, dest, bytes)?;
        if let Some(s) = self.staged.last_mut() {
            s.fresh = true;
        }
        Ok(())
    }

    fn input_at(&self, target: &Path) -> Option<&(PathBuf, FileId)> {
        let id = file_id(target)?;
        self.inputs.iter().find(|(_, i)| *i == id)
    }

    /// Writes `bytes` for `dest` into a temporary file beside it.
    pub fn file(&mut self, flag: &str, dest: &Path, bytes: &[u8]) -> Result<()> {
        self.file_with(flag, dest, &mut |w| w.write_all(bytes))
    }

    /// Writes `dest` through `write` into a temporary file beside it (for outputs too large to
    /// hold in memory).
    pub fn file_with(
        &mut self,
        flag: &str,
        dest: &Path,
        write: &mut dyn FnMut(&mut std::io::BufWriter<&File>) -> std::io::Result<()>,
    ) -> Result<()> {
        self.check(flag, dest)?;
        let (target, existing) = resolve(flag, dest)?;
        let parent = parent_of(&target);
        let temp =
            new_temp(&parent, existing.as_ref().map(Metadata::permissions)).map_err(|e| write_error(flag, dest, &e))?;
        {
            let mut w = std::io::BufWriter::new(temp.as_file());
            write(&mut w)
                .and_then(|_| w.flush())
                .map_err(|e| write_error(flag, dest, &e))?;
        }
        self.staged.push(StagedFile {
            flag: flag.to_string(),
            temp: temp.into_temp_path(),
            dest: target,
            fresh: false,
        });
        Ok(())
    }

    /// Makes sure the directory `dir` exists for outputs (created now, removed again if the run
    /// fails); refuses a path that exists and is not a directory.
    pub fn dir(&mut self, flag: &str, dir: &Path) -> Result<()> {
        self.check_dir(flag, dir)?;
        if dir.exists() {
            return Ok(());
        }
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|a| !a.exists())
            .map(Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(dir).map_err(|e| write_error(flag, &dir.join("."), &e))?;
        self.created.extend(missing);
        Ok(())
    }

    /// Checks, before any work, a directory the run will write files into (`flag` names it): a
    /// directory or nothing yet, and not inside (nor the same as) a directory the run reads.
    pub fn check_dir(&self, flag: &str, dir: &Path) -> Result<()> {
        check_dir_destination(flag, dir)?;
        match self.tree_holding(dir) {
            Some(tree) => Err(inside_input_dir(flag, dir, tree)),
            None => Ok(()),
        }
    }

    /// Renames every staged file into place. Existing files are moved aside first and restored
    /// if any rename fails, so the destinations end as they were, or all new.
    pub fn commit(mut self) -> Result<()> {
        let staged = std::mem::take(&mut self.staged);
        let mut done: Vec<(PathBuf, Option<PathBuf>)> = Vec::new();
        for s in staged {
            if s.fresh {
                if let Err(e) = s.temp.persist_noclobber(&s.dest) {
                    rollback(&done);
                    return Err(bad_output(format!(
                        "{} {}: not written: {} (something appeared there while the run went; it is never replaced)",
                        s.flag,
                        s.dest.display(),
                        e.error
                    )));
                }
                done.push((s.dest, None));
                continue;
            }
            let backup = if s.dest.exists() {
                let b = backup_path(&s.dest);
                if let Err(e) = std::fs::rename(&s.dest, &b) {
                    rollback(&done);
                    return Err(bad_output(format!(
                        "{} {}: cannot replace it: {e}",
                        s.flag,
                        s.dest.display()
                    )));
                }
                Some(b)
            } else {
                None
            };
            if let Err(e) = s.temp.persist(&s.dest) {
                if let Some(b) = &backup {
                    let _ = std::fs::rename(b, &s.dest);
                }
                rollback(&done);
                return Err(bad_output(format!(
                    "{} {}: cannot write: {}",
                    s.flag,
                    s.dest.display(),
                    e.error
                )));
            }
            done.push((s.dest, backup));
        }
        for (_, backup) in &done {
            if let Some(b) = backup {
                let _ = std::fs::remove_file(b);
            }
        }
        self.created.clear();
        Ok(())
    }
}

impl Drop for Outputs {
    /// A run that did not commit leaves nothing: the staged files go with their `TempPath`s, and
    /// the directories made for them are removed when empty.
    fn drop(&mut self) {
        self.staged.clear();
        // Deepest first, whatever order they were made in.
        self.created.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in &self.created {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A new temporary file in `dir`, with `mode` (an existing destination's) or the default mode of
/// a new file (0666 less the umask).
fn new_temp(dir: &Path, mode: Option<Permissions>) -> std::io::Result<tempfile::NamedTempFile> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(".npu-audit-").suffix(".tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(Permissions::from_mode(0o666));
    }
    let temp = builder.tempfile_in(dir)?;
    if let Some(p) = mode {
        temp.as_file().set_permissions(p)?;
    }
    Ok(temp)
}

fn backup_path(dest: &Path) -> PathBuf {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    parent_of(dest).join(format!(".{name}.npu-audit-previous-{}", std::process::id()))
}

/// Undoes the renames done so far: new files removed, replaced ones restored.
fn rollback(done: &[(PathBuf, Option<PathBuf>)]) {
    for (dest, backup) in done.iter().rev() {
        match backup {
            Some(b) => {
                let _ = std::fs::rename(b, dest);
            }
            None => {
                let _ = std::fs::remove_file(dest);
            }
        }
    }
}

/// The error for an output inside a directory the run reads.
fn inside_input_dir(flag: &str, path: &Path, tree: &InputTree) -> anyhow::Error {
    let what = if tree.own {
        "the directory of this run's own records"
    } else {
        "a directory this run reads"
    };
    bad_output(format!(
        "{flag} {} is inside {}, {what}; choose a place outside it",
        path.display(),
        tree.shown.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_land_together_or_not_at_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a.json");
        let b = dir.path().join("sub").join("b.md");
        std::fs::write(&a, "old").expect("write");
        let mut out = Outputs::none();
        out.file("--out", &a, b"new").expect("stage");
        out.dir("--node-data", &dir.path().join("sub")).expect("dir");
        out.file("--markdown", &b, b"md").expect("stage");
        // Dropped without commit: nothing changed, the made directory is gone.
        drop(out);
        assert_eq!(std::fs::read_to_string(&a).expect("read"), "old");
        assert!(!dir.path().join("sub").exists());
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("ls").count(),
            1,
            "no temporary left"
        );
        let mut out = Outputs::none();
        out.file("--out", &a, b"new").expect("stage");
        out.commit().expect("commit");
        assert_eq!(std::fs::read_to_string(&a).expect("read"), "new");
    }

    #[cfg(unix)]
    #[test]
    fn modes_are_kept_and_inputs_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let report = dir.path().join("r.json");
        std::fs::write(&report, "x").expect("write");
        std::fs::set_permissions(&report, Permissions::from_mode(0o640)).expect("chmod");
        let mut out = Outputs::none();
        out.file("--out", &report, b"y").expect("stage");
        out.commit().expect("commit");
        let mode = std::fs::metadata(&report).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        let model = dir.path().join("m.onnx");
        std::fs::write(&model, "model").expect("write");
        let out = Outputs::new(InputFiles::new().add(&model));
        let err = out
            .check("--out", &dir.path().join(".").join("m.onnx"))
            .expect_err("refused");
        assert!(format!("{err}").contains("one of this run's inputs"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn nothing_is_written_inside_a_directory_the_run_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let golden = dir.path().join("golden");
        std::fs::create_dir_all(golden.join("inputs")).expect("mkdir");
        std::fs::write(golden.join("manifest.json"), "{}").expect("write");
        let outside = dir.path().join("elsewhere");
        std::fs::create_dir(&outside).expect("mkdir");
        // A link from outside into the directory, and a hard link of one of its files.
        std::os::unix::fs::symlink(golden.join("inputs"), outside.join("into")).expect("symlink");
        std::fs::hard_link(golden.join("manifest.json"), outside.join("m.json")).expect("link");
        let out = Outputs::new(InputFiles::new().add(&golden));
        for (path, why) in [
            (golden.join("manifest.json"), "one of this run's inputs"),
            (golden.join("new.html"), "a directory this run reads"),
            (
                golden.join("inputs").join("deeper").join("x.md"),
                "a directory this run reads",
            ),
            (outside.join("into").join("x.json"), "a directory this run reads"),
            (outside.join("m.json"), "one of this run's inputs"),
        ] {
            let err = out.check("--html", &path).expect_err("refused");
            assert!(format!("{err}").contains(why), "{}: {err}", path.display());
        }
        let err = out
            .check_dir("--save-outputs", &golden.join("out"))
            .expect_err("refused");
        assert!(format!("{err}").contains("a directory this run reads"), "{err}");
        out.check("--html", &outside.join("report.html"))
            .expect("outside is fine");
        out.check_dir("--save-outputs", &outside.join("out"))
            .expect("outside is fine");
    }
}
