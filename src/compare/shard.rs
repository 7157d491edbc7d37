//! `--shard auto|i/n`: which part of an audit this job runs. `compare` splits its targets;
//! `eval` splits work units of (target, sample range) sized by each target's cost per sample, so
//! every shard gets an even share of the time whatever mix of fast and slow targets the audit has.
//! `auto` reads the part from the environment of the cluster engine that started the job.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::error::bad_flag;
use crate::exec::selection::Requested;
use crate::target::{Backend, TargetRole, TargetSpec};

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

/// The variable a job may name its shard count with when its engine gives only an index
/// (Kubernetes Indexed Jobs, AWS Batch array jobs).
pub const COUNT_VAR: &str = "NPU_AUDIT_SHARD_COUNT";

/// A cluster engine's variables for an array job's index and size: (engine, index variable,
/// whether the index is 1-based, count variable; `None` when the engine sets no count).
const ENGINES: &[(&str, &str, bool, Option<&str>)] = &[
    ("Kubernetes Indexed Job", "JOB_COMPLETION_INDEX", false, None),
    (
        "Slurm job array",
        "SLURM_ARRAY_TASK_ID",
        false,
        Some("SLURM_ARRAY_TASK_COUNT"),
    ),
    ("GitLab parallel", "CI_NODE_INDEX", true, Some("CI_NODE_TOTAL")),
    (
        "Buildkite parallelism",
        "BUILDKITE_PARALLEL_JOB",
        false,
        Some("BUILDKITE_PARALLEL_JOB_COUNT"),
    ),
    ("AWS Batch array job", "AWS_BATCH_JOB_ARRAY_INDEX", false, None),
    (
        "Google Cloud Batch",
        "BATCH_TASK_INDEX",
        false,
        Some("BATCH_TASK_COUNT"),
    ),
];

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
        let found = engine_shards(get)?;
        match (self, found.as_slice()) {
            (ShardFlag::Auto, []) => Err(bad_flag(format!(
                "--shard auto: no cluster engine's array variables are set ({}); give --shard I/N",
                ENGINES.iter().map(|e| e.1).collect::<Vec<_>>().join(", ")
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
                if let Some((engine, other)) = found.iter().find(|(_, s)| s != &shard) {
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

/// The shard every engine whose index variable is set says this job is (refused when an engine's
/// variables are not an index within a count).
fn engine_shards(get: &dyn Fn(&str) -> Option<String>) -> Result<Vec<(&'static str, Shard)>> {
    let number = |var: &str, text: &str| {
        text.trim()
            .parse::<usize>()
            .map_err(|_| bad_flag(format!("--shard: {var}='{text}' is not a number")))
    };
    let mut found = Vec::new();
    for &(engine, index_var, one_based, count_var) in ENGINES {
        let Some(index_text) = get(index_var).filter(|v| !v.trim().is_empty()) else {
            continue;
        };
        let mut index = number(index_var, &index_text)?;
        if engine.starts_with("Slurm") {
            // An array `--array=1-8` numbers its tasks from 1: the index counts from the first.
            let min = get("SLURM_ARRAY_TASK_MIN")
                .map(|m| number("SLURM_ARRAY_TASK_MIN", &m))
                .transpose()?;
            index = index.checked_sub(min.unwrap_or(0)).ok_or_else(|| {
                bad_flag(format!(
                    "--shard: SLURM_ARRAY_TASK_ID={index} is below SLURM_ARRAY_TASK_MIN"
                ))
            })?;
            if get("SLURM_ARRAY_TASK_STEP").is_some_and(|s| s.trim() != "1") {
                return Err(bad_flag(
                    "--shard auto: the Slurm array's step is not 1; submit it as --array=0-(N-1)",
                ));
            }
        }
        let (count_name, count_text) = match count_var.and_then(|v| get(v).map(|t| (v, t))) {
            Some(found) => found,
            None => match get(COUNT_VAR) {
                Some(t) => (COUNT_VAR, t),
                None => {
                    return Err(bad_flag(format!(
                        "--shard: the {engine} sets {index_var} but not how many parts there are: set {COUNT_VAR} to the job's count"
                    )))
                }
            },
        };
        let count = number(count_name, &count_text)?;
        let index = if one_based { index } else { index + 1 };
        if count == 0 || index == 0 || index > count || count > MAX_SHARDS {
            return Err(bad_flag(format!(
                "--shard: {index_var}={} is not a part of {count_name}={count} (at most {MAX_SHARDS} parts)",
                index_text.trim()
            )));
        }
        found.push((engine, Shard { index, count }));
    }
    Ok(found)
}

/// `--costs RUN=WEIGHT,...`: each run's relative cost of one sample (the `plan` command measures
/// them or reads them off a previous eval's report, and hands the same to every shard, so every
/// shard cuts the work at the same places).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Costs(pub BTreeMap<String, u64>);

impl Costs {
    /// Parses `cpu=1,qnn:sm8650=700` (weights are positive integers); `;` separates the items
    /// instead when a target's id holds commas (`qnn:sm8650,htp_arch=75=700;cpu=1`).
    pub fn parse(text: &str) -> Result<Costs> {
        let mut map = BTreeMap::new();
        let separator = if text.contains(';') { ';' } else { ',' };
        for item in text.split(separator).map(str::trim).filter(|s| !s.is_empty()) {
            let (run, weight) = item
                .rsplit_once('=')
                .ok_or_else(|| bad_flag(format!("--costs '{item}' is not TARGET=WEIGHT")))?;
            let weight: u64 = weight
                .trim()
                .parse()
                .ok()
                .filter(|w| (1..=1_000_000_000).contains(w))
                .ok_or_else(|| {
                    bad_flag(format!(
                        "--costs '{item}': the weight is not a whole number from 1 to 10^9"
                    ))
                })?;
            if map.insert(run.trim().to_string(), weight).is_some() {
                return Err(bad_flag(format!("--costs names {} twice", run.trim())));
            }
        }
        Ok(Costs(map))
    }

    /// The flag's text for these costs (the form `parse` reads: `;`-separated when an id holds a
    /// comma).
    pub fn to_flag(&self) -> String {
        let separator = if self.0.keys().any(|r| r.contains(',')) {
            ";"
        } else {
            ","
        };
        self.0
            .iter()
            .map(|(r, w)| format!("{r}={w}"))
            .collect::<Vec<_>>()
            .join(separator)
    }

    /// The weight of a target: as given, else the default of its backend.
    pub fn weight(&self, spec: &TargetSpec) -> u64 {
        self.0.get(&spec.id).copied().unwrap_or_else(|| default_cost(spec))
    }
}

/// A sample's cost on a backend relative to the CPU EP's when nothing better is known. Measured on
/// 2-core x86-64 machines (docs/scale.md): the QNN HTP simulator took 120 to 750 times the CPU
/// EP's time per sample of the PP-OCR classifier, depending on what shared the cores, the ARM64
/// CPU EP under qemu about 30 times. `plan --costs-from` measures them on the user's own eval.
pub fn default_cost(spec: &TargetSpec) -> u64 {
    match spec.backend {
        Backend::Cpu => 1,
        Backend::OpenVino { .. } => 2,
        Backend::Arm64 { .. } => 30,
        Backend::Qnn(_) => 700,
        Backend::DirectMl | Backend::Cuda | Backend::TensorRt => 1,
    }
}

/// A piece of work: one run over the samples `start..end` of the set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unit {
    /// The target's id.
    pub run: String,
    pub start: usize,
    pub end: usize,
}

/// Splits `samples` samples on each of `runs` (id, weight per sample) into `count` shards of
/// even cost. The runs are laid end to end, each as long as its samples times its weight, and the
/// line is cut into `count` equal lengths; a sample goes to the shard its start falls in. Each
/// shard so gets a few contiguous units (few sessions to start), and no shard's cost is more than
/// one sample's away from the even share.
pub fn split(runs: &[(String, u64)], samples: usize, count: usize) -> Vec<Vec<Unit>> {
    let total: u128 = runs.iter().map(|(_, w)| u128::from(*w) * samples as u128).sum();
    let mut shards: Vec<Vec<Unit>> = vec![Vec::new(); count];
    if total == 0 || count == 0 {
        return shards;
    }
    let shard_of = |at: u128| ((at * count as u128 / total) as usize).min(count - 1);
    let mut offset: u128 = 0;
    for (run, weight) in runs {
        let w = u128::from(*weight);
        let mut start = 0;
        while start < samples {
            let shard = shard_of(offset + w * start as u128);
            // The first sample past `start` whose start falls in a later shard.
            let (mut lo, mut hi) = (start + 1, samples);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if shard_of(offset + w * mid as u128) == shard {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            shards[shard].push(Unit {
                run: run.clone(),
                start,
                end: lo,
            });
            start = lo;
        }
        offset += w * samples as u128;
    }
    shards
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn costs_of_targets_whose_ids_hold_commas_read_back_as_written() {
        let mut map = BTreeMap::new();
        map.insert("qnn:sm8650,htp_arch=75,soc_model=57".to_string(), 700);
        map.insert("cpu".to_string(), 1);
        let costs = Costs(map);
        let flag = costs.to_flag();
        assert_eq!(flag, "cpu=1;qnn:sm8650,htp_arch=75,soc_model=57=700");
        assert_eq!(Costs::parse(&flag).unwrap(), costs);
        assert_eq!(Costs::parse("cpu=1,qnn:sm8650=700").unwrap().0.len(), 2);
        assert!(Shard::parse("1/10001").is_err() && Shard::parse("1/10000").is_ok());
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
    fn units_cover_every_sample_once_and_even_out_the_cost() {
        // Hand-worked: 10 samples on cpu (weight 1) then qnn (weight 9) is a line of 100 cut at 25,
        // 50 and 75. qnn's sample i starts at 10 + 9i: 10, 19 | 28, 37, 46 | 55, 64, 73 | 82, 91.
        // Costs 28, 27, 27, 18: each within one qnn sample of the even 25.
        let runs = vec![("cpu".to_string(), 1), ("qnn".to_string(), 9)];
        let shards = split(&runs, 10, 4);
        let unit = |run: &str, start, end| Unit {
            run: run.into(),
            start,
            end,
        };
        assert_eq!(shards[0], vec![unit("cpu", 0, 10), unit("qnn", 0, 2)]);
        assert_eq!(shards[1], vec![unit("qnn", 2, 5)]);
        assert_eq!(shards[2], vec![unit("qnn", 5, 8)]);
        assert_eq!(shards[3], vec![unit("qnn", 8, 10)]);
        for count in 1..=13 {
            for samples in [0, 1, 2, 7, 2000] {
                let runs = vec![("a".to_string(), 1), ("b".to_string(), 700), ("c".to_string(), 30)];
                let shards = split(&runs, samples, count);
                assert_eq!(shards.len(), count);
                for (run, w) in &runs {
                    let mut covered: Vec<(usize, usize)> = shards
                        .iter()
                        .flatten()
                        .filter(|u| &u.run == run)
                        .map(|u| (u.start, u.end))
                        .collect();
                    covered.sort();
                    let mut next = 0;
                    for (s, e) in covered {
                        assert_eq!(s, next);
                        assert!(e > s);
                        next = e;
                    }
                    assert_eq!(next, samples, "{run} w{w}");
                }
                let total: u64 = runs.iter().map(|(_, w)| w * samples as u64).sum();
                for shard in &shards {
                    let cost: u64 = shard
                        .iter()
                        .map(|u| runs.iter().find(|r| r.0 == u.run).map_or(0, |r| r.1) * (u.end - u.start) as u64)
                        .sum();
                    assert!(
                        cost.abs_diff(total / count as u64) <= 700 + 1,
                        "{count} {samples}: {cost}"
                    );
                }
            }
        }
    }

    #[test]
    fn costs_parse_and_print_back() {
        let c = Costs::parse("cpu=1, qnn:sm8650=700").unwrap();
        assert_eq!(c.to_flag(), "cpu=1,qnn:sm8650=700");
        assert!(Costs::parse("cpu=0").is_err() && Costs::parse("cpu").is_err() && Costs::parse("a=1,a=2").is_err());
    }
}
