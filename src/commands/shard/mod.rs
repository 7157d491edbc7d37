//! Scale: which part of an audit one job runs, and how the work is cut. `--shard i/n|auto` names
//! the part (`auto`: from the cluster engine's variables, `engines`); `compare` deals out its
//! targets; `eval` cuts work units of (target, sample range) by each target's cost per sample
//! (`costs`, `units`), so every shard gets an even share of the time whatever mix of fast and slow
//! targets the audit has; `plan` prints the jobs of a split (`jobs`), each with the CPUs, memory
//! and time it asks for (`resources`, in the engines' units: `limits`). One job's part is run by
//! its command (`compare`, `eval`); the parts are joined by `merge`.

pub mod costs;
mod engines;
pub mod jobs;
pub mod limits;
pub mod resources;
pub mod units;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::data::target::TargetRole;
use crate::execution::exec::selection::Requested;
use crate::foundation::error::bad_flag;

pub use costs::{default_cost, Costs};
pub use engines::COUNT_VAR;
pub use units::{units, windows, Unit};

/// `--shard i/n`: the i-th (1-based) of n parts of an audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

/// `--shard` as given: a part, or `auto` (the engine's environment says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardFlag {
    Fixed(Shard),
    Auto,
}

/// The most parts an eval or a compare is split into (`plan` makes at most this many; an array
/// job of 10000 tasks is already beyond most engines).
pub const MAX_SHARDS: usize = 10_000;

impl Shard {
    /// Parses `i/n` with 1 <= i <= n <= [`MAX_SHARDS`].
    pub fn parse(text: &str) -> Result<Shard> {
        let bad = || {
            bad_flag(format!(
                "--shard '{text}' is not i/n with 1 <= i <= n <= {MAX_SHARDS} (e.g. 2/4), nor auto"
            ))
        };
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse::<usize>().map_err(|_| bad())?,
            n.trim().parse::<usize>().map_err(|_| bad())?,
        );
        if index == 0 || count == 0 || index > count || count > MAX_SHARDS {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Keeps this shard's targets: the k-th target (in the order asked) goes to shard
    /// `k mod n + 1`, so the split depends only on the target list. The baseline runs in every
    /// shard (each target's excess over it and the per-layer comparison need it).
    pub fn deal(&self, all: Vec<Requested>) -> (Vec<Requested>, crate::report::compare::ShardInfo) {
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
        let info = crate::report::compare::ShardInfo {
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

impl ShardFlag {
    /// Parses `auto` or `i/n` (the value parser of `--shard`).
    pub fn parse(text: &str) -> Result<ShardFlag> {
        if text.trim() == "auto" {
            return Ok(ShardFlag::Auto);
        }
        Shard::parse(text).map(ShardFlag::Fixed)
    }

    /// The part this job runs: `auto` from the engine's variables (refused when no engine, or
    /// several, set theirs), `i/n` as given unless an engine's variables say another part.
    pub fn resolve(self) -> Result<Shard> {
        self.resolve_in(&|name| std::env::var(name).ok())
    }

    /// [`ShardFlag::resolve`] with the environment read through `get`.
    pub fn resolve_in(self, get: &dyn Fn(&str) -> Option<String>) -> Result<Shard> {
        let found = engines::engine_shards(get)?;
        match (self, found.as_slice()) {
            (ShardFlag::Auto, []) => Err(bad_flag(format!(
                "--shard auto: no cluster engine's array variables are set ({}); give --shard I/N",
                engines::ENGINES.iter().map(|e| e.1).collect::<Vec<_>>().join(", ")
            ))),
            (ShardFlag::Auto, [(_, shard)]) => Ok(*shard),
            (ShardFlag::Auto, several) => Err(bad_flag(format!(
                "--shard auto: several engines set their array variables ({}); give --shard I/N",
                several
                    .iter()
                    .map(|(e, s)| format!("{e}: {}/{}", s.index, s.count))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
            (ShardFlag::Fixed(shard), found) => {
                // A Slurm task's own number names its part when it is the part's index: plan's
                // script runs task K of `--array=1-N` as K/N, also when K is submitted again alone
                // (then Slurm's variables say an array of one).
                let slurm_task = get("SLURM_ARRAY_TASK_ID").and_then(|t| t.trim().parse::<usize>().ok());
                let agrees = |engine: &str, s: &Shard| {
                    s == &shard || (engine.starts_with("Slurm") && slurm_task == Some(shard.index))
                };
                if let Some((engine, other)) = found.iter().find(|(e, s)| !agrees(e, s)) {
                    return Err(bad_flag(format!(
                        "--shard {}/{} disagrees with the {engine}'s variables, which say {}/{}; give --shard auto, or the part the engine started",
                        shard.index, shard.count, other.index, other.count
                    )));
                }
                Ok(shard)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }
    #[test]
    fn auto_reads_each_engine_and_refuses_none_several_or_a_disagreement() {
        let cases: &[(&[(&str, &str)], Shard)] = &[
            (
                &[("JOB_COMPLETION_INDEX", "0"), (COUNT_VAR, "4")],
                Shard { index: 1, count: 4 },
            ),
            (
                &[("SLURM_ARRAY_TASK_ID", "3"), ("SLURM_ARRAY_TASK_COUNT", "4")],
                Shard { index: 4, count: 4 },
            ),
            (
                &[
                    ("SLURM_ARRAY_TASK_ID", "3"),
                    ("SLURM_ARRAY_TASK_MIN", "1"),
                    ("SLURM_ARRAY_TASK_COUNT", "4"),
                ],
                Shard { index: 3, count: 4 },
            ),
            (
                &[("CI_NODE_INDEX", "2"), ("CI_NODE_TOTAL", "5")],
                Shard { index: 2, count: 5 },
            ),
            (
                &[("BUILDKITE_PARALLEL_JOB", "4"), ("BUILDKITE_PARALLEL_JOB_COUNT", "5")],
                Shard { index: 5, count: 5 },
            ),
            (
                &[("AWS_BATCH_JOB_ARRAY_INDEX", "1"), (COUNT_VAR, "2")],
                Shard { index: 2, count: 2 },
            ),
        ];
        for (vars, want) in cases {
            assert_eq!(ShardFlag::Auto.resolve_in(&env(vars)).unwrap(), *want, "{vars:?}");
        }
        let refused = |flag: ShardFlag, vars: &[(&str, &str)]| flag.resolve_in(&env(vars)).unwrap_err().to_string();
        assert!(refused(ShardFlag::Auto, &[]).contains("no cluster engine"));
        assert!(refused(
            ShardFlag::Auto,
            &[
                ("CI_NODE_INDEX", "1"),
                ("CI_NODE_TOTAL", "2"),
                ("SLURM_ARRAY_TASK_ID", "0"),
                ("SLURM_ARRAY_TASK_COUNT", "2")
            ]
        )
        .contains("several engines"));
        assert!(refused(ShardFlag::Auto, &[("JOB_COMPLETION_INDEX", "0")]).contains(COUNT_VAR));
        assert!(refused(ShardFlag::Auto, &[("CI_NODE_INDEX", "0"), ("CI_NODE_TOTAL", "2")]).contains("not a part"));
        assert!(refused(ShardFlag::Auto, &[("CI_NODE_INDEX", "3"), ("CI_NODE_TOTAL", "2")]).contains("not a part"));
        assert!(refused(ShardFlag::Auto, &[("CI_NODE_INDEX", "x"), ("CI_NODE_TOTAL", "2")]).contains("not a number"));
        let fixed = ShardFlag::Fixed(Shard { index: 1, count: 2 });
        assert!(refused(fixed, &[("CI_NODE_INDEX", "2"), ("CI_NODE_TOTAL", "2")]).contains("disagrees"));
        // Task 2 of plan's `--array=1-3` submitted again alone: an array of one to Slurm, part 2/3
        // by its own number; another part is still refused.
        let alone = [
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_MIN", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "1"),
        ];
        let second = Shard { index: 2, count: 3 };
        assert_eq!(ShardFlag::Fixed(second).resolve_in(&env(&alone)).unwrap(), second);
        let third = ShardFlag::Fixed(Shard { index: 3, count: 3 });
        assert!(refused(third, &alone).contains("disagrees"));
        assert_eq!(
            fixed
                .resolve_in(&env(&[("CI_NODE_INDEX", "1"), ("CI_NODE_TOTAL", "2")]))
                .unwrap()
                .index,
            1
        );
        assert_eq!(fixed.resolve_in(&env(&[])).unwrap().count, 2);
        assert!(
            ShardFlag::parse("0/3").is_err() && ShardFlag::parse("4/3").is_err() && ShardFlag::parse("1/0").is_err()
        );
    }

    #[test]
    fn a_part_beyond_the_most_shards_is_refused() {
        assert!(Shard::parse("1/10001").is_err() && Shard::parse("1/10000").is_ok());
    }
}
