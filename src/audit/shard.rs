//! `--shard i/n`: which part of an audit's targets this job runs.

use anyhow::Result;

use crate::exec::plan::Requested;
use crate::target::TargetRole;

/// `--shard i/n`: the i-th (1-based) of n parts of an audit's targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// Parses `i/n` with 1 <= i <= n.
    pub fn parse(text: &str) -> Result<Shard> {
        let bad = || crate::error::bad_flag(format!("--shard '{text}' is not i/n with 1 <= i <= n (e.g. 2/4)"));
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse::<usize>().map_err(|_| bad())?,
            n.trim().parse::<usize>().map_err(|_| bad())?,
        );
        if index == 0 || count == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Keeps this shard's targets: the k-th target (in the order asked) goes to shard
    /// `k mod n + 1`, so the split depends only on the target list. The baseline runs in every
    /// shard (each target's excess over it and the per-layer comparison need it).
    pub fn split(&self, all: Vec<Requested>) -> (Vec<Requested>, crate::report::model::ShardInfo) {
        let all_targets = all.iter().map(|r| r.spec.id.clone()).collect();
        let mut k = 0;
        let mine: Vec<Requested> = all
            .into_iter()
            .filter(|r| {
                if r.role == TargetRole::Baseline {
                    return true;
                }
                k += 1;
                (k - 1) % self.count == self.index - 1
            })
            .collect();
        let info = crate::report::model::ShardInfo {
            index: self.index,
            count: self.count,
            all_targets,
            targets: mine.iter().map(|r| r.spec.id.clone()).collect(),
            outputs_dir: None,
            output_files: Default::default(),
        };
        (mine, info)
    }
}
