//! `npu-audit merge`: the parts of a sharded audit joined into the report one job would have
//! written. Every part is read once (a part may be a pipe) and is of one kind: `compare` shard
//! reports (`compare`) or `eval` shards' files (`eval`); each part's kind is read from the part,
//! and parts of two kinds are refused.

pub mod compare;
pub mod eval;

use std::path::PathBuf;

use anyhow::Result;

pub use compare::{MergeOptions, ShardOutputs};
pub use eval::EvalMergeOptions;

/// What a merge joins: the parts' paths with their bytes, and their kind.
pub struct Parts {
    pub read: Vec<(PathBuf, Vec<u8>)>,
    pub kind: PartKind,
}

/// The kind of report a merge joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartKind {
    Compare,
    EvalShard,
}

/// Reads every part once (size-capped, `-` for standard input) and says their kind by the first.
pub fn read(paths: &[PathBuf]) -> Result<Parts> {
    let read = paths
        .iter()
        .map(|p| {
            let bytes = crate::foundation::userfile::read_user_file(p).map_err(|e| unreadable(p, &e))?;
            Ok((p.clone(), bytes))
        })
        .collect::<Result<Vec<_>>>()?;
    let kinds: Vec<PartKind> = read.iter().map(|(_, b)| PartKind::of(b)).collect();
    let kind = kinds.first().copied().unwrap_or(PartKind::Compare);
    if let Some(i) = kinds.iter().position(|k| *k != kind) {
        return Err(crate::foundation::error::bad_report(format!(
            "{}: {} among {}: every part of a merge is of one kind",
            crate::foundation::userfile::shown(&read[i].0),
            kinds[i].noun(),
            kind.noun()
        )));
    }
    Ok(Parts { read, kind })
}

/// Why a part cannot be read. A name with a shell pattern's `*`, `?` or `[` that is no file is a
/// pattern that matched nothing (a shell passes it on as it is): no part it stands for was written,
/// as when every task of an array job failed before writing its file.
fn unreadable(path: &std::path::Path, e: &dyn std::fmt::Display) -> anyhow::Error {
    let shown = crate::foundation::userfile::shown(path);
    let pattern = path.to_string_lossy().contains(['*', '?', '[']);
    if pattern && std::fs::symlink_metadata(path).is_err() {
        return crate::foundation::error::bad_report(format!(
            "{shown}: no file matches this pattern: none of the parts it stands for was written"
        ));
    }
    crate::foundation::error::bad_report(format!("{shown}: cannot read: {e}"))
}

impl PartKind {
    /// The kind one part declares: an eval shard's file says so in its `format` (or, written by
    /// an older release, by its shard fields); anything else is read as a compare report.
    fn of(bytes: &[u8]) -> PartKind {
        if crate::commands::eval::shard::is_shard_file(bytes) {
            PartKind::EvalShard
        } else {
            PartKind::Compare
        }
    }

    fn noun(self) -> &'static str {
        match self {
            PartKind::Compare => "a compare report",
            PartKind::EvalShard => "an eval shard's file",
        }
    }
}
