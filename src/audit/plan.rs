//! Which targets an audit runs, which of them must succeed, and the runtimes they need.

use std::collections::HashMap;

use anyhow::Result;

use crate::report::model::TargetRole;
use crate::runtime::{builds_for, platform_obstacle, Build, Provisioner, Runtime, TargetRuntime};
use crate::target::{parse_targets, TargetSpec};

/// A target asked for, with its role in the audit.
#[derive(Debug, Clone)]
pub struct Requested {
    pub spec: TargetSpec,
    pub role: TargetRole,
    /// Whether its failure fails the audit (exit code 3).
    pub required: bool,
}

/// A target with its role in the audit and its runtimes.
#[derive(Debug, Clone)]
pub struct PlannedTarget {
    pub spec: TargetSpec,
    pub role: TargetRole,
    /// Whether its failure fails the audit (exit code 3).
    pub required: bool,
    /// The runtimes, or why the target cannot run here.
    pub runtime: Result<TargetRuntime, String>,
}

/// Every target this machine might run, for `compare` without `--target`.
pub fn default_specs() -> Vec<TargetSpec> {
    crate::target::all_known()
        .into_iter()
        .filter(|s| platform_obstacle(&s.backend).is_none())
        .collect()
}

/// Whether an `--allow-failure` pattern (`all`, an id, or a glob such as `qnn:*`) names `id`.
pub fn matches(pattern: &str, id: &str) -> bool {
    match pattern {
        "all" | "*" => true,
        p => crate::layers::select::Pattern::parse(p).is_ok_and(|p| p.matches(id)),
    }
}

/// `--shard i/n`: the i-th (1-based) of n parts of an audit's targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// Parses `i/n` with 1 <= i <= n.
    pub fn parse(text: &str) -> Result<Shard> {
        let bad = || crate::error::usage(format!("--shard '{text}' is not i/n with 1 <= i <= n (e.g. 2/4)"));
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
        };
        (mine, info)
    }
}

/// The baseline's id: the CPU EP on the same quantized model without graph rewrites.
pub const BASELINE_ID: &str = "cpu:noopt";

/// Parses `--target` values (or picks the defaults) and adds the baseline.
pub fn targets(flags: &[String], allow_failure: &[String], add_baseline: bool) -> Result<Vec<Requested>> {
    let explicit = !flags.is_empty();
    let specs = if explicit {
        parse_targets(flags)?
    } else {
        default_specs()
    };
    let mut out: Vec<Requested> = specs
        .into_iter()
        .map(|spec| {
            let required = explicit && !allow_failure.iter().any(|p| matches(p, &spec.id));
            Requested {
                spec,
                role: TargetRole::Target,
                required,
            }
        })
        .collect();
    if add_baseline && !out.iter().any(|r| r.spec.id == BASELINE_ID) {
        let mut base = parse_targets(&[BASELINE_ID.to_string()])?;
        out.push(Requested {
            spec: base.remove(0),
            role: TargetRole::Baseline,
            required: false,
        });
    }
    Ok(out)
}

/// Finds (or fetches) the runtimes of every target, once per build.
pub fn provision(targets: Vec<Requested>, provisioner: &Provisioner) -> Result<Vec<PlannedTarget>> {
    let mut cache: HashMap<&'static str, Result<Runtime, String>> = HashMap::new();
    let mut get = |b: &'static Build| -> Result<Result<Runtime, String>> {
        if let Some(r) = cache.get(b.key) {
            return Ok(r.clone());
        }
        let r = match provisioner.get(b) {
            Ok(rt) => Ok(rt),
            Err(e) => {
                // A bad --runtime flag is the user's error; a missing download is a finding.
                if crate::error::exit_code_of(&e) == crate::error::ExitCode::Usage {
                    return Err(e);
                }
                Err(crate::error::one_line(&e))
            }
        };
        cache.insert(b.key, r.clone());
        Ok(r)
    };
    let mut planned = Vec::with_capacity(targets.len());
    for Requested { spec, role, required } in targets {
        let runtime = match platform_obstacle(&spec.backend) {
            Some(reason) => Err(reason),
            None => {
                let (host, plugin) = builds_for(&spec.backend);
                match get(host)? {
                    Err(e) => Err(e),
                    Ok(h) => match plugin.map(&mut get).transpose()? {
                        Some(Err(e)) => Err(e),
                        Some(Ok(p)) => Ok(TargetRuntime {
                            host: h,
                            plugin: Some(p),
                        }),
                        None => Ok(TargetRuntime { host: h, plugin: None }),
                    },
                }
            }
        };
        planned.push(PlannedTarget {
            spec,
            role,
            required,
            runtime,
        });
    }
    Ok(planned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_targets_are_required_unless_allowed_to_fail() {
        let t = targets(
            &["cpu".into(), "qnn:sm8650".into(), "qnn:sm8350".into()],
            &["qnn:sm83*".into()],
            true,
        )
        .unwrap();
        let ids: Vec<_> = t.iter().map(|r| (r.spec.id.as_str(), r.role, r.required)).collect();
        assert_eq!(
            ids,
            vec![
                ("cpu", TargetRole::Target, true),
                ("qnn:sm8650", TargetRole::Target, true),
                ("qnn:sm8350", TargetRole::Target, false),
                ("cpu:noopt", TargetRole::Baseline, false)
            ]
        );
    }

    #[test]
    fn an_explicit_noopt_target_is_its_own_baseline() {
        let t = targets(&["cpu:noopt".into()], &[], true).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].role, TargetRole::Target);
    }
}
